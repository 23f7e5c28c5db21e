from ldpfda.cli import main

raise SystemExit(main())
