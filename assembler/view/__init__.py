"""`capsem view`: recorded sessions as pages in the browser (served on 127.0.0.1 only), one
self-contained HTML file to share, and full-text search over every session.

`queries` reads the databases into typed data (pure functions over a connection), `charts`
draws inline SVG, `app` serves the pages (Starlette + Jinja2 under uvicorn, in-process), `export`
writes the single HTML file, `search` keeps the FTS5 index in `$CAPSEM_HOME/search.db`.
"""
