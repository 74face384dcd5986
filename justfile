# Thin wrappers over the capsem CLI, with the recipe names of Capsem's justfile.

list-sessions *ARGS:
    uv run --frozen capsem list-sessions {{ARGS}}

inspect-session *ARGS:
    uv run --frozen capsem inspect-session {{ARGS}}

query-session SQL *ARGS:
    uv run --frozen capsem query-session "{{SQL}}" {{ARGS}}

update-prices *ARGS:
    uv run --frozen capsem update-prices {{ARGS}}

cost-report *ARGS:
    uv run --frozen capsem cost-report {{ARGS}}

run *ARGS:
    uv run --frozen capsem run {{ARGS}}

demo:
    make demo

test:
    make test
