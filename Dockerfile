# distlab on CUDA: the same `distlab train` / `distlab suite run` commands as on a laptop, on all GPUs.
#   docker compose build && docker compose run --rm hrm
FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# git: run manifests record the commit when the project is mounted as a repository
RUN apt-get update && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/distlab
# metadata first, so editing code does not reinstall the dependencies
COPY pyproject.toml README.md ./
COPY src ./src
# torch comes from the base image (it satisfies torch>=2.4, so pip keeps it)
RUN pip install ".[plots,tensorboard,wandb]" && distlab recipes

# data/, runs/, experiment_results/ and logs/ are mounted here by docker-compose.yml
WORKDIR /workspace
CMD ["bash"]
