"""keel-web: the HTTPS gateway between the browser panel and keel-engine."""
