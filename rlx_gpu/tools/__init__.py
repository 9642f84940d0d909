"""The tools behind the ``rlx-gpu`` command (:mod:`.cli`): ``info``, ``bench`` and ``check`` (``check-shaders``)."""
