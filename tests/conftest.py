"""Suite-wide fixtures.

None, on purpose: the suite runs with the garbage collector on. (It once had to turn the
collector off, because SDK generators that streams left suspended were finalised from the
fake server's thread; the providers now close them, see
``tests/providers/test_generator_leak.py``.)
"""
