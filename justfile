# Thin wrappers over the capsem CLI, with the recipe names of Capsem's justfile.
# `just list-sessions --with-model`, `just query-session "SELECT ..." <id>`, ...

list-sessions *ARGS:
    uv run --frozen capsem list-sessions {{ARGS}}

inspect-session *ARGS:
    uv run --frozen capsem inspect-session {{ARGS}}

query-session SQL *ARGS:
    uv run --frozen capsem query-session {{quote(SQL)}} {{ARGS}}

update-prices *ARGS:
    uv run --frozen capsem update-prices {{ARGS}}

cost-report *ARGS:
    uv run --frozen capsem cost-report {{ARGS}}

vacuum *ARGS:
    uv run --frozen capsem vacuum {{ARGS}}

run *ARGS:
    uv run --frozen capsem run {{ARGS}}

demo:
    uv run --frozen capsem demo

test *ARGS:
    uv run --frozen pytest -q {{ARGS}}
