"""The advantage estimators (dual-discount GAE, GRPO, GiGPO, their registry) and the curriculum."""
