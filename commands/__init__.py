"""What the command lines share (a parser whose errors are one line and exit status 2) and
the commands that need neither backend (`trainscale catalog`)."""
