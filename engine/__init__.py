"""One engine instance, start to finish, one package a concern, bottom up: what runs beside a stack
(``stackside``), what a measurement gives (``measurement``), what a user wrote (``config``), the machine
(``host``), the stacks (``stacks``, ``reference``), a stack's process (``launch``), and one configuration
benchmarked (``bench``); the commands ``install`` and ``reaper``; the leaves ``files``, ``secrets``, ``http``."""
