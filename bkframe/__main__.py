from bkframe.cli.main import main

main()
