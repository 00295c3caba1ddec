"""The ``kcoord`` command root: the broker, the admin tools and the pipeline under one program."""
