"""The wire protocol, without I/O (``docs/protocol.md`` documents every byte):

- :mod:`.codes`: op and status codes, flags, limits, the frame and message headers;
- :mod:`.frames`: :class:`~.frames.FrameBuffer` (bytes in, whole frames out, with the
  bounds a peer's bytes can hit) and the encoding of frames and message headers;
- :mod:`.ops`: one module per operation -- its request and response classes and the
  functions that turn each into bytes and back;
- :mod:`.base`: what every response shares (:class:`~.base.Reply`), a request that does
  not parse (:class:`~.base.BadMessage`);
- :mod:`.table`: the one description of each operation (its row, by op code), and the
  decoders of a frame's messages.

Callers import each name from the module that defines it.
"""
