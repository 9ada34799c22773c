"""`python -m memorysaas_client …` is the `memorysaas` command."""

from memorysaas_client.cli import run

run()
