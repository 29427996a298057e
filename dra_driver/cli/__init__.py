"""The ``gpushare-dra`` command line."""
