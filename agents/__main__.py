from agents.cli import main

raise SystemExit(main())
