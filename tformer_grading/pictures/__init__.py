"""Pictures a learner sees beside the words of a check.

- :mod:`.cells`: which cells of an attention map (weights or mask) are wrong, and how.
- :mod:`.attention_maps`: the learner's map next to the right one, those cells marked,
  as a :class:`.attention_maps.Picture` (PNG, caption, alt text).
- :mod:`.attach`: a check attaches a picture to its failure; the failure shows it.
- :mod:`.training_curves`: the learner's training piece and the reference's, each
  trained, their curves side by side (an exercise's optional cell).
"""
