"""lm-eval's command line with mlx-lm's own model class (mlx_lm/evaluate.py's
`MLXLM`: its loglikelihood runs mlx-lm's model on the weights directly)
registered as `mlxlm-ref`, so the same task runs through mlx-lm as through
our server (scripts/lm-eval-check.sh). The subclass only takes the extra
arguments lm-eval 0.4.13 passes (`device`, `max_batch_size`) that mlx-lm
0.32.2's class does not; no chat template, as local-completions sends none."""
from lm_eval.__main__ import cli_evaluate
from lm_eval.api.registry import register_model
from mlx_lm.evaluate import MLXLM


@register_model("mlxlm-ref")
class Reference(MLXLM):
    def __init__(self, path_or_hf_repo, batch_size=1, **_ignored):
        super().__init__(path_or_hf_repo, batch_size=int(batch_size), use_chat_template=False)


cli_evaluate()
