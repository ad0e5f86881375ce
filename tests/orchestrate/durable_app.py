"""An app that declares a durable topic (for the services tests)."""

DURABLE_TOPICS = ("Checkpoint",)


def main(ctx: object) -> int:
    return 0
