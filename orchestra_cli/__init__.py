"""The `orchestra` command line: the top layer, wiring the library, stages and flows together."""
