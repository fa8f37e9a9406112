"""Other balancers' configs turned into Keel's (``keel import-proxlb``).

Each importer is pure: the text of the other tool's file goes in; a dict that
``keel.config.parse`` accepts and a list of notes (what changed meaning, what could not
be carried over) come out.  Rendering that as commented YAML is a separate step.
"""
