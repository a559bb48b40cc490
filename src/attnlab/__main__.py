from attnlab.cli import main

raise SystemExit(main())
