"""The special tokens every model kind's sequences use; task symbols start at ``N_SPECIAL``.

``BOS`` opens every sequence, ``SEP`` separates the prompt from the answer, and ``BLANK`` fills
the encoder's answer slots. They belong to the model kinds (``pelab.model_kinds``), never to a
task's data.
"""

BOS, SEP, BLANK = 0, 1, 2  # begin-of-sequence, prompt/answer separator, encoder answer slot
N_SPECIAL = 3
