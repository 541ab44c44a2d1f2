"""qkspec: when does self-attention localize? (Bao et al., ICML 2024)."""
import setuptools

setuptools.setup(
    name="qkspec",
    version="0.1.0",
    description=("Signal propagation, QK-eigenspectrum, LocATER, rank and "
                 "entropy collapse of self-attention in JAX/Flax."),
    packages=setuptools.find_packages(include=["qkspec", "qkspec.*"]),
    package_data={"qkspec.data.wikitext2": ["checksums.tsv"]},
    python_requires=">=3.11",
    install_requires=[
        "jax>=0.10.2",
        "flax>=0.12.8",
        "optax>=0.2.5",
        "orbax-checkpoint>=0.11.17",
        "tensorflow-datasets>=4.9.10",  # used without TensorFlow (array_record)
        "array_record>=0.5",  # the format tfds.data_source reads
        "importlib_resources>=6.0",  # tfds imports it, undeclared
        "absl-py>=2.0",
        "ml-collections>=1.0",
        "matplotlib>=3.9",
        "numpy>=2.0",
        "scipy>=1.13",  # the report's t quantiles
    ],
    extras_require={
        # pytest-randomly: every run in a new order (its seed printed)
        # tensorboard: so that the suite checks the event files too
        # transformers: Hugging Face's Flax BERT, GPT-2 and ViT for the
        #   for_flax tests (4.x, its last line with Flax models; no torch)
        # nbclient, nbformat, ipykernel, jupytext: run notebooks/tour.py
        #   headless (tests/notebooks/tour_test.py, notebooks/run_tour.py)
        "test": ["pytest>=8", "pytest-xdist>=3", "pytest-randomly>=3.15",
                 "chex>=0.1.87", "ruff>=0.6",
                 "tensorboard>=2.18", "transformers>=4.40,<4.50",
                 "nbclient>=0.10", "nbformat>=5.10", "ipykernel>=6.29",
                 "jupytext>=1.16"],
        "cuda": ["jax[cuda13]"],   # NVIDIA GPUs (jax[cuda12] works too)
        "tpu": ["jax[tpu]"],
        "bench": ["torch"],  # reference implementations only, never at run time
        # TensorBoard event files next to metrics.jsonl (no TensorFlow):
        # qkspec.training.metric_writer writes them when this is installed.
        "tensorboard": ["tensorboard>=2.18"],
    },
)
