"""Regenerate normbench/catalog/models.json from the stored copies of the models' published config.json files
(tests/fixtures/model_configs/<model>.json: the fields the sites cite, as published at each model's config_url).

    python scripts/catalog_from_configs.py          # writes normbench/catalog/models.json

tests/test_catalog.py checks that the committed file equals what this derives, so an edit to the derivation or to a
stored config shows up there.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from normbench.catalog import cited_values, sites_from_config  # noqa: E402

HF = "https://huggingface.co/{}/blob/main/{}"
#: key -> (display name, Hugging Face repository, config path in it, note)
MODELS = {
    "llama-3.1-8b": ("Llama 3.1 8B", "meta-llama/Llama-3.1-8B", "config.json", ""),
    "llama-3.1-70b": ("Llama 3.1 70B", "meta-llama/Llama-3.1-70B", "config.json", ""),
    "llama-3.1-405b": ("Llama 3.1 405B", "meta-llama/Llama-3.1-405B", "config.json", ""),
    "qwen3-8b": ("Qwen3 8B", "Qwen/Qwen3-8B", "config.json", ""),
    "qwen3-235b-a22b": ("Qwen3 235B-A22B", "Qwen/Qwen3-235B-A22B", "config.json",
                        "MoE: the norms run on every token whatever the experts; q and k heads counted apart (GQA)"),
    "deepseek-v3": ("DeepSeek-V3", "deepseek-ai/DeepSeek-V3", "config.json",
                    "MLA: RMSNorms at the q and kv LoRA ranks besides the hidden-size norms"),
    "gemma-3-27b": ("Gemma 3 27B", "google/gemma-3-27b-pt", "config.json",
                    "the language model (text_config); rms_norm_eps is not in config.json (transformers' "
                    "Gemma3TextConfig default: 1e-06)"),
    "mistral-7b": ("Mistral 7B v0.1", "mistralai/Mistral-7B-v0.1", "config.json", ""),
    "olmo-2-7b": ("OLMo-2 7B", "allenai/OLMo-2-1124-7B", "config.json",
                  "norms after attention and MLP (before the residual add) and q/k norms over the whole projections"),
    "gpt2": ("GPT-2 small", "openai-community/gpt2", "config.json", ""),
    "vit-b16": ("ViT-B/16", "google/vit-base-patch16-224", "config.json", "224x224: 197 tokens"),
    "vit-l16": ("ViT-L/16", "google/vit-large-patch16-224", "config.json", "224x224: 197 tokens"),
    "resnet-50": ("ResNet-50", "microsoft/resnet-50", "config.json",
                  "224x224; every BatchNorm by channel width and feature-map size, count per image"),
    "flux.1-dev": ("FLUX.1 [dev] transformer", "black-forest-labs/FLUX.1-dev", "transformer/config.json",
                   "1024x1024: 4096 image tokens and 512 text tokens; norm eps values are diffusers code constants"),
}


def build(config_dir: Path = ROOT / "tests" / "fixtures" / "model_configs") -> dict:
    out = {}
    for key, (name, repo, path, note) in MODELS.items():
        cfg = json.loads((config_dir / f"{key}.json").read_text())
        family, arch, sites = sites_from_config(cfg, f"{key}.json")
        entry = {"name": name, "family": family, "architecture": arch, "config_url": HF.format(repo, path),
                 "config": cited_values(cfg, sites), "sites": [s.to_dict() for s in sites]}
        if note:
            entry["note"] = note
        out[key] = entry
    return {"about": "Norm sites of real models, derived from each model's published config.json (config_url); "
                     "`normbench models` prints them. Regenerate with scripts/catalog_from_configs.py.",
            "models": out}


if __name__ == "__main__":
    target = ROOT / "normbench" / "catalog" / "models.json"
    target.write_text(json.dumps(build(), indent=1) + "\n")
    print(f"wrote {target}")
