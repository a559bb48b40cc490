"""One module per mathematical claim, each computing it on real numbers."""
