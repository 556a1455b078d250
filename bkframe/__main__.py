from bkframe.cli import main

main()
