"""RESP for the load scripts (scripts/*-load.py), standard library only."""


def command(*words):
    """The RESP array of bulk strings that sends `words` (bytes, or anything `str` takes)."""
    out = [b"*%d\r\n" % len(words)]
    for w in words:
        w = w if isinstance(w, bytes) else str(w).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(w), w))
    return b"".join(out)
