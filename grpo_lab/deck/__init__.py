"""The interview deck as data: the cards in ``cards/*.toml``, their numbers in providers.

See :mod:`grpo_lab.deck.registry` for how a card quotes a computed number.
"""
