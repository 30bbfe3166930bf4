"""What a recipe's training function calls: the ``Session``, checkpoints, mixed precision, model wrapping and
placement, and the one step loop every recipe runs (``loop.py``).

(Named ``training`` because ``distlab.train`` is the Python API, ``from distlab import train``.)"""
