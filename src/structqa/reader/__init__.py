"""The general reader: one resumable build of the most accurate span reader the public data on
the machine can make (``structqa reader build``), and where ``ask``, ``serve`` and
``model.init_from=reader`` find it."""
