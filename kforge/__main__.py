from kforge.cli import main

raise SystemExit(main())
