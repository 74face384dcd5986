from assembler.cli import main

main()
