"""The team's side of the command line: `capsem team init|push|status|local-server` (`cli.py`),
and the team's answers read from its PostgreSQL (`report.py`: `cost-report --team`,
`list-sessions --team`; `page.py`: `view --team`)."""
