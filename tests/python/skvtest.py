"""Where the Python tests find what they check against: the repository, the shared models
($SKV_MODELS, default ../shared/models beside the repository), the CLI ($SKV_CLI, default
build/sparsekv) and the stories260K model."""

import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.environ.get("SKV_MODELS") or os.path.join(os.path.dirname(REPO), "shared", "models")
CLI = os.environ.get("SKV_CLI") or os.path.join(REPO, "build", "sparsekv")
STORIES = os.path.join(MODELS, "stories260K", "stories260K.gguf")
