from attnlab.cli import program

program()
