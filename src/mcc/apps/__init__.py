"""Mission apps: each is ``def main(ctx: AppContext) -> int``, run by mcc.orchestrate.runtime."""
