"""Pictures a failed check shows beside its words.

- :mod:`.cells`: which cells of an attention map (weights or mask) are wrong, and how.
- :mod:`.attention`: the learner's map next to the right one, those cells marked, as a
  :class:`.attention.Picture` (PNG, caption, alt text).
- :mod:`.attach`: a check attaches a picture to its failure; the failure shows it.
"""
