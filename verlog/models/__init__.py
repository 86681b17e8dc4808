"""Model folders: what one must hold, vision-language facts, the tiny models built locally."""
