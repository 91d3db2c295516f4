"""The Replay page: a recorded run played back step by step (its player, its trace box and controls)."""
