from agents.cli import main

if __name__ == "__main__":  # a spawned child importing this module must not run it again
    raise SystemExit(main())
