"""Every DiT transformer class of diffusers under ``jattn.diffusers.enabled()``: a tiny
random-weight instance of each (float32, CPU; the configs and inputs of diffusers' own model tests,
with one layer of each kind), one forward and one backward under the switch. Checked: (a)
``counts()`` shows no fallback: every attention call, through diffusers' dispatcher or straight to
SDPA, went to jattn (``KNOWN_FALLBACKS`` lists the exceptions, with why); (b) the output and the
parameters' gradients are within the gates of docs/DESIGN.md section 2 (output: f32; gradients:
the backward's) of the same model run in float64 with PyTorch's attention, or, where the float32
model itself misses them (its other layers: StableAudioDiT at some seeds), no further off than the
same float32 model on PyTorch's attention, or, failing that, every call jattn served within its own
gates there (``served_calls_exact``: a model that amplifies float32 rounding makes one draw of it
against another a coin toss); (c) nothing raises.
``MASKED`` overrides inputs so that the masks the models build have padding, causal parts, segments
(the test configs' masks are all ones). python/README.md and bench/results/
cpu-2026-12-06-diffusers-models/ report the table this test prints (``-s``)."""

from __future__ import annotations

import copy
import warnings
from typing import Any, Callable, Dict, Tuple

import pytest
import torch

import jattn
from jattn_testing import BWD_GATE_COS, BWD_GATE_MAX_ABS, BWD_GATE_REL_L2, metrics

diffusers = pytest.importorskip("diffusers")


def R(shape, dtype: str = "float32"):
    """A standard normal tensor (drawn when the model's inputs are made)."""
    return ("R", tuple(shape), dtype)


def T(values, dtype: str = "float32") -> torch.Tensor:
    return torch.tensor(values, dtype=getattr(torch, dtype))


def F(shape, value, dtype: str = "float32") -> torch.Tensor:
    return torch.full(tuple(shape), value, dtype=getattr(torch, dtype))


class FromModel:
    """An input the model makes itself (its rotary embedding): ``make(model)``, cast with the model."""

    def __init__(self, make: Callable[[Any], Any]) -> None:
        self.make = make


def K(lengths, total: int, dtype: str = "bool") -> torch.Tensor:
    """A key mask ``[B, total]``: row b attends its first ``lengths[b]`` tokens (right padding)."""
    return (torch.arange(total)[None, :] < torch.tensor(lengths)[:, None]).to(getattr(torch, dtype))


def omnigen_mask() -> torch.Tensor:
    """OmniGen's mask (its processor's create_mask) for 24 text tokens, the time token and 16 image
    tokens: causal over the text, the output image bidirectional (OmniGenTransformer2DModel makes it
    (1 - mask) * finfo.min: a float mask whose masked entries are finite)."""
    m = torch.ones(41, 41).tril()
    m[25:, :] = 1
    return m.repeat(2, 1, 1)


MODELS = {
    "AceStepTransformer1DModel": (
        {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "in_channels": 24,
            "audio_acoustic_hidden_dim": 8,
            "patch_size": 2,
            "rope_theta": 10000.0,
            "rms_norm_eps": 1e-06,
            "sliding_window": 16,
        },
        {
            "hidden_states": R((2, 8, 8)),
            "timestep": T([1.5409960746765137, 0.293428897857666]),
            "timestep_r": T([1.5409960746765137, 0.293428897857666]),
            "encoder_hidden_states": R((2, 10, 32)),
            "context_latents": R((2, 8, 16)),
        },
    ),
    "AllegroTransformer3DModel": (
        {
            "num_attention_heads": 2,
            "attention_head_dim": 8,
            "in_channels": 4,
            "out_channels": 4,
            "num_layers": 1,
            "cross_attention_dim": 16,
            "sample_width": 8,
            "sample_height": 8,
            "sample_frames": 8,
            "caption_channels": 8,
        },
        {
            "hidden_states": R((2, 4, 2, 8, 8)),
            "encoder_hidden_states": R((2, 16, 8)),
            "timestep": T([44, 239], "int64"),
        },
    ),
    "AnyFlowFARTransformer3DModel": (
        {
            "patch_size": (1, 2, 2),
            "compressed_patch_size": (1, 4, 4),
            "full_chunk_limit": 3,
            "num_attention_heads": 2,
            "attention_head_dim": 12,
            "in_channels": 4,
            "out_channels": 4,
            "text_dim": 16,
            "freq_dim": 256,
            "ffn_dim": 32,
            "num_layers": 1,
            "cross_attn_norm": True,
            "rope_max_seq_len": 32,
            "gate_value": 0.25,
            "deltatime_type": "r",
        },
        {
            "hidden_states": R((1, 4, 4, 16, 16)),
            "timestep": F((1, 4), 500.0),
            "r_timestep": F((1, 4), 250.0),
            "encoder_hidden_states": R((1, 12, 16)),
            "chunk_partition": [2, 2],
        },
    ),
    "AnyFlowTransformer3DModel": (
        {
            "patch_size": (1, 2, 2),
            "num_attention_heads": 2,
            "attention_head_dim": 12,
            "in_channels": 4,
            "out_channels": 4,
            "text_dim": 16,
            "freq_dim": 256,
            "ffn_dim": 32,
            "num_layers": 1,
            "cross_attn_norm": True,
            "rope_max_seq_len": 32,
            "gate_value": 0.25,
            "deltatime_type": "r",
        },
        {
            "hidden_states": R((1, 2, 4, 16, 16)),
            "timestep": F((1, 2), 500.0),
            "r_timestep": F((1, 2), 250.0),
            "encoder_hidden_states": R((1, 12, 16)),
        },
    ),
    "AuraFlowTransformer2DModel": (
        {
            "sample_size": 32,
            "patch_size": 2,
            "in_channels": 4,
            "num_mmdit_layers": 1,
            "num_single_dit_layers": 1,
            "attention_head_dim": 8,
            "num_attention_heads": 4,
            "caption_projection_dim": 32,
            "joint_attention_dim": 32,
            "out_channels": 4,
            "pos_embed_max_size": 256,
        },
        {
            "hidden_states": R((2, 4, 32, 32)),
            "encoder_hidden_states": R((2, 256, 32)),
            "timestep": T([44, 239], "int64"),
        },
    ),
    "BriaFiboTransformer2DModel": (
        {
            "patch_size": 1,
            "in_channels": 48,
            "num_layers": 1,
            "num_single_layers": 1,
            "attention_head_dim": 8,
            "num_attention_heads": 2,
            "joint_attention_dim": 64,
            "text_encoder_dim": 32,
            "pooled_projection_dim": None,
            "axes_dims_rope": [0, 4, 4],
        },
        {
            "hidden_states": R((1, 256, 48)),
            "encoder_hidden_states": R((1, 32, 64)),
            "img_ids": R((256, 3)),
            "txt_ids": R((32, 3)),
            "timestep": T([1.0]),
            "text_encoder_layers": [R((1, 32, 32)), R((1, 32, 32))],
        },
    ),
    "BriaTransformer2DModel": (
        {
            "patch_size": 1,
            "in_channels": 4,
            "num_layers": 1,
            "num_single_layers": 1,
            "attention_head_dim": 8,
            "num_attention_heads": 2,
            "joint_attention_dim": 32,
            "pooled_projection_dim": None,
            "axes_dims_rope": [0, 4, 4],
        },
        {
            "hidden_states": R((1, 16, 4)),
            "encoder_hidden_states": R((1, 48, 32)),
            "img_ids": R((16, 3)),
            "txt_ids": R((48, 3)),
            "timestep": T([1.0]),
        },
    ),
    "ChromaTransformer2DModel": (
        {
            "patch_size": 1,
            "in_channels": 4,
            "num_layers": 1,
            "num_single_layers": 1,
            "attention_head_dim": 16,
            "num_attention_heads": 2,
            "joint_attention_dim": 32,
            "axes_dims_rope": [4, 4, 8],
            "approximator_num_channels": 8,
            "approximator_hidden_dim": 16,
            "approximator_layers": 1,
        },
        {
            "hidden_states": R((1, 16, 4)),
            "encoder_hidden_states": R((1, 48, 32)),
            "img_ids": R((16, 3)),
            "txt_ids": R((48, 3)),
            "timestep": T([1.0]),
        },
    ),
    "ChronoEditTransformer3DModel": (
        {
            "patch_size": (1, 2, 2),
            "num_attention_heads": 2,
            "attention_head_dim": 8,
            "in_channels": 16,
            "out_channels": 16,
            "text_dim": 32,
            "freq_dim": 16,
            "ffn_dim": 32,
            "num_layers": 1,
            "cross_attn_norm": True,
            "qk_norm": "rms_norm_across_heads",
            "eps": 1e-06,
            "image_dim": None,
            "added_kv_proj_dim": None,
            "rope_max_seq_len": 64,
            "pos_embed_seq_len": None,
            "rope_temporal_skip_len": 8,
        },
        {
            "hidden_states": R((1, 16, 2, 8, 8)),
            "timestep": T([44], "int64"),
            "encoder_hidden_states": R((1, 12, 32)),
            "encoder_hidden_states_image": None,
        },
    ),
    "CogVideoXTransformer3DModel": (
        {
            "num_attention_heads": 2,
            "attention_head_dim": 8,
            "in_channels": 4,
            "out_channels": 4,
            "time_embed_dim": 2,
            "text_embed_dim": 8,
            "num_layers": 1,
            "sample_width": 8,
            "sample_height": 8,
            "sample_frames": 8,
            "patch_size": 2,
            "patch_size_t": None,
            "temporal_compression_ratio": 4,
            "max_text_seq_length": 8,
        },
        {"hidden_states": R((2, 1, 4, 8, 8)), "encoder_hidden_states": R((2, 8, 8)), "timestep": T([44, 239], "int64")},
    ),
    "CogView3PlusTransformer2DModel": (
        {
            "patch_size": 2,
            "in_channels": 4,
            "num_layers": 1,
            "attention_head_dim": 4,
            "num_attention_heads": 2,
            "out_channels": 4,
            "text_embed_dim": 8,
            "time_embed_dim": 8,
            "condition_dim": 2,
            "pos_embed_max_size": 8,
            "sample_size": 8,
        },
        {
            "hidden_states": R((2, 4, 8, 8)),
            "encoder_hidden_states": R((2, 8, 8)),
            "original_size": F((2, 2), 64, "int64"),
            "target_size": F((2, 2), 64, "int64"),
            "crop_coords": F((2, 2), 0, "int64"),
            "timestep": T([44, 239], "int64"),
        },
    ),
    "CogView4Transformer2DModel": (
        {
            "patch_size": 2,
            "in_channels": 4,
            "num_layers": 1,
            "attention_head_dim": 4,
            "num_attention_heads": 4,
            "out_channels": 4,
            "text_embed_dim": 8,
            "time_embed_dim": 8,
            "condition_dim": 4,
        },
        {
            "hidden_states": R((2, 4, 8, 8)),
            "encoder_hidden_states": R((2, 8, 8)),
            "timestep": T([44, 239], "int64"),
            "original_size": F((2, 2), 64, "int64"),
            "target_size": F((2, 2), 64, "int64"),
            "crop_coords": F((2, 2), 0, "int64"),
        },
    ),
    "ConsisIDTransformer3DModel": (
        {
            "num_attention_heads": 2,
            "attention_head_dim": 8,
            "in_channels": 4,
            "out_channels": 4,
            "time_embed_dim": 2,
            "text_embed_dim": 8,
            "num_layers": 1,
            "sample_width": 8,
            "sample_height": 8,
            "sample_frames": 8,
            "patch_size": 2,
            "temporal_compression_ratio": 4,
            "max_text_seq_length": 8,
            "cross_attn_interval": 1,
            "is_kps": False,
            "is_train_face": True,
            "cross_attn_dim_head": 1,
            "cross_attn_num_heads": 1,
            "LFE_id_dim": 2,
            "LFE_vit_dim": 2,
            "LFE_depth": 5,
            "LFE_dim_head": 8,
            "LFE_num_heads": 2,
            "LFE_num_id_token": 1,
            "LFE_num_querie": 1,
            "LFE_output_dim": 10,
            "LFE_ff_mult": 1,
            "LFE_num_scale": 1,
        },
        {
            "hidden_states": R((2, 1, 4, 8, 8)),
            "encoder_hidden_states": R((2, 8, 8)),
            "timestep": T([44, 239], "int64"),
            "id_vit_hidden": [F((2, 2, 2), 1.0)],
            "id_cond": F((2, 2), 1.0),
        },
    ),
    "Cosmos3OmniTransformer": (
        {
            "head_dim": 6,
            "hidden_act": "relu2",
            "hidden_size": 12,
            "intermediate_size": 24,
            "latent_channel": 2,
            "latent_patch_size": 1,
            "num_attention_heads": 2,
            "num_hidden_layers": 1,
            "num_key_value_heads": 1,
            "patch_latent_dim": 2,
            "qk_norm_for_text": False,
            "rms_norm_eps": 1e-05,
            "rope_axes_dim": [1, 1, 1],
            "rope_theta": 100000000.0,
            "vocab_size": 32,
        },
        {
            "input_ids": T([1, 2], "int64"),
            "text_indexes": T([0, 1], "int64"),
            "position_ids": F((3, 3), 0, "int64"),
            "und_len": 2,
            "sequence_length": 3,
            "vision_tokens": [T([[[[[1.5409960746765137]]], [[[-0.293428897857666]]]]])],
            "vision_token_shapes": [
                (
                    1,
                    1,
                    1,
                )
            ],
            "vision_sequence_indexes": T([2], "int64"),
            "vision_mse_loss_indexes": T([2], "int64"),
            "vision_timesteps": T([1.0]),
            "vision_noisy_frame_indexes": [T([0], "int64")],
        },
    ),
    "CosmosTransformer3DModel": (
        {
            "in_channels": 4,
            "out_channels": 4,
            "num_attention_heads": 2,
            "attention_head_dim": 12,
            "num_layers": 1,
            "mlp_ratio": 2,
            "text_embed_dim": 16,
            "adaln_lora_dim": 4,
            "max_size": (4, 32, 32),
            "patch_size": (1, 2, 2),
            "rope_scale": (2.0, 1.0, 1.0),
            "concat_padding_mask": True,
            "extra_pos_embed_type": "learnable",
        },
        {
            "hidden_states": R((1, 4, 1, 16, 16)),
            "timestep": T([44], "int64"),
            "encoder_hidden_states": R((1, 12, 16)),
            "attention_mask": F((1, 12), 1.0),
            "fps": 30,
            "padding_mask": F((1, 1, 16, 16), 0.0),
        },
    ),
    "DiTTransformer2DModel": (
        {
            "in_channels": 4,
            "out_channels": 8,
            "activation_fn": "gelu-approximate",
            "num_attention_heads": 2,
            "attention_head_dim": 4,
            "attention_bias": True,
            "num_layers": 1,
            "norm_type": "ada_norm_zero",
            "num_embeds_ada_norm": 8,
            "patch_size": 2,
            "sample_size": 8,
        },
        {
            "hidden_states": R((4, 4, 8, 8)),
            "timestep": T([44, 239, 933, 760], "int64"),
            "class_labels": T([0, 3, 1, 0], "int64"),
        },
    ),
    "EasyAnimateTransformer3DModel": (
        {
            "attention_head_dim": 16,
            "num_attention_heads": 2,
            "in_channels": 4,
            "mmdit_layers": 1,
            "num_layers": 1,
            "out_channels": 4,
            "patch_size": 2,
            "sample_height": 60,
            "sample_width": 90,
            "text_embed_dim": 16,
            "time_embed_dim": 8,
            "time_position_encoding_type": "3d_rope",
            "timestep_activation_fn": "silu",
        },
        {
            "hidden_states": R((2, 4, 2, 16, 16)),
            "timestep": T([44, 239], "int64"),
            "timestep_cond": None,
            "encoder_hidden_states": R((2, 16, 16)),
            "encoder_hidden_states_t5": None,
            "inpaint_latents": None,
            "control_latents": None,
        },
    ),
    "ErnieImageTransformer2DModel": (
        {
            "hidden_size": 16,
            "num_attention_heads": 1,
            "num_layers": 1,
            "ffn_hidden_size": 16,
            "in_channels": 16,
            "out_channels": 16,
            "patch_size": 1,
            "text_in_dim": 16,
            "rope_theta": 256,
            "rope_axes_dim": (8, 4, 4),
            "eps": 1e-06,
            "qk_layernorm": True,
        },
        {
            "hidden_states": R((1, 16, 16, 16)),
            "timestep": T([1.0]),
            "text_bth": R((1, 16, 16)),
            "text_lens": T([16], "int64"),
        },
    ),
    "Flux2Transformer2DModel": (
        {
            "patch_size": 1,
            "in_channels": 4,
            "num_layers": 1,
            "num_single_layers": 1,
            "attention_head_dim": 16,
            "num_attention_heads": 2,
            "joint_attention_dim": 32,
            "timestep_guidance_channels": 256,
            "axes_dims_rope": [4, 4, 4, 4],
        },
        {
            "hidden_states": R((1, 16, 4)),
            "encoder_hidden_states": R((1, 48, 32)),
            "img_ids": T(
                [
                    [
                        [0, 0, 0, 0],
                        [0, 0, 1, 0],
                        [0, 0, 2, 0],
                        [0, 0, 3, 0],
                        [0, 1, 0, 0],
                        [0, 1, 1, 0],
                        [0, 1, 2, 0],
                        [0, 1, 3, 0],
                        [0, 2, 0, 0],
                        [0, 2, 1, 0],
                        [0, 2, 2, 0],
                        [0, 2, 3, 0],
                        [0, 3, 0, 0],
                        [0, 3, 1, 0],
                        [0, 3, 2, 0],
                        [0, 3, 3, 0],
                    ]
                ],
                "int64",
            ),
            "txt_ids": T(
                [
                    [
                        [0, 0, 0, 0],
                        [0, 0, 0, 1],
                        [0, 0, 0, 2],
                        [0, 0, 0, 3],
                        [0, 0, 0, 4],
                        [0, 0, 0, 5],
                        [0, 0, 0, 6],
                        [0, 0, 0, 7],
                        [0, 0, 0, 8],
                        [0, 0, 0, 9],
                        [0, 0, 0, 10],
                        [0, 0, 0, 11],
                        [0, 0, 0, 12],
                        [0, 0, 0, 13],
                        [0, 0, 0, 14],
                        [0, 0, 0, 15],
                        [0, 0, 0, 16],
                        [0, 0, 0, 17],
                        [0, 0, 0, 18],
                        [0, 0, 0, 19],
                        [0, 0, 0, 20],
                        [0, 0, 0, 21],
                        [0, 0, 0, 22],
                        [0, 0, 0, 23],
                        [0, 0, 0, 24],
                        [0, 0, 0, 25],
                        [0, 0, 0, 26],
                        [0, 0, 0, 27],
                        [0, 0, 0, 28],
                        [0, 0, 0, 29],
                        [0, 0, 0, 30],
                        [0, 0, 0, 31],
                        [0, 0, 0, 32],
                        [0, 0, 0, 33],
                        [0, 0, 0, 34],
                        [0, 0, 0, 35],
                        [0, 0, 0, 36],
                        [0, 0, 0, 37],
                        [0, 0, 0, 38],
                        [0, 0, 0, 39],
                        [0, 0, 0, 40],
                        [0, 0, 0, 41],
                        [0, 0, 0, 42],
                        [0, 0, 0, 43],
                        [0, 0, 0, 44],
                        [0, 0, 0, 45],
                        [0, 0, 0, 46],
                        [0, 0, 0, 47],
                    ]
                ],
                "int64",
            ),
            "timestep": T([1.0]),
            "guidance": T([1.0]),
        },
    ),
    "FluxTransformer2DModel": (
        {
            "patch_size": 1,
            "in_channels": 4,
            "num_layers": 1,
            "num_single_layers": 1,
            "attention_head_dim": 16,
            "num_attention_heads": 2,
            "joint_attention_dim": 32,
            "pooled_projection_dim": 32,
            "axes_dims_rope": [4, 4, 8],
        },
        {
            "hidden_states": R((1, 16, 4)),
            "encoder_hidden_states": R((1, 48, 32)),
            "pooled_projections": R((1, 32)),
            "img_ids": R((16, 3)),
            "txt_ids": R((48, 3)),
            "timestep": T([1.0]),
        },
    ),
    "GlmImageTransformer2DModel": (
        {
            "patch_size": 2,
            "in_channels": 4,
            "out_channels": 4,
            "num_layers": 1,
            "attention_head_dim": 8,
            "num_attention_heads": 2,
            "text_embed_dim": 32,
            "time_embed_dim": 16,
            "condition_dim": 8,
            "prior_vq_quantizer_codebook_size": 64,
        },
        {
            "hidden_states": R((1, 4, 8, 8)),
            "encoder_hidden_states": R((1, 12, 32)),
            "prior_token_id": T([44], "int64"),
            "prior_token_drop": T([False], "bool"),
            "timestep": T([44], "int64"),
            "target_size": F((1, 2), 8.0),
            "crop_coords": F((1, 2), 0.0),
        },
    ),
    "HeliosTransformer3DModel": (
        {
            "patch_size": (1, 2, 2),
            "num_attention_heads": 2,
            "attention_head_dim": 12,
            "in_channels": 4,
            "out_channels": 4,
            "text_dim": 16,
            "freq_dim": 256,
            "ffn_dim": 32,
            "num_layers": 1,
            "cross_attn_norm": True,
            "qk_norm": "rms_norm_across_heads",
            "rope_dim": (4, 4, 4),
            "has_multi_term_memory_patch": True,
            "guidance_cross_attn": True,
            "zero_history_timestep": True,
            "is_amplify_history": False,
        },
        {
            "hidden_states": R((1, 4, 2, 16, 16)),
            "timestep": T([44], "int64"),
            "encoder_hidden_states": R((1, 12, 16)),
            "indices_hidden_states": F((1, 2), 1.0),
            "indices_latents_history_short": T([[1.0]]),
            "indices_latents_history_mid": T([[1.0]]),
            "indices_latents_history_long": F((1, 4), 1.0),
            "latents_history_short": R((1, 4, 1, 16, 16)),
            "latents_history_mid": R((1, 4, 1, 16, 16)),
            "latents_history_long": R((1, 4, 4, 16, 16)),
        },
    ),
    "HiDreamImageTransformer2DModel": (
        {
            "patch_size": 2,
            "in_channels": 4,
            "out_channels": 4,
            "num_layers": 1,
            "num_single_layers": 1,
            "attention_head_dim": 8,
            "num_attention_heads": 4,
            "caption_channels": [8, 4],
            "text_emb_dim": 8,
            "num_routed_experts": 2,
            "num_activated_experts": 2,
            "axes_dims_rope": (4, 2, 2),
            "max_resolution": (32, 32),
            "llama_layers": (0, 1),
            "force_inference_output": True,
        },
        {
            "hidden_states": R((2, 4, 32, 32)),
            "encoder_hidden_states_t5": R((2, 8, 8)),
            "encoder_hidden_states_llama3": R((2, 2, 8, 4)),
            "pooled_embeds": R((2, 8)),
            "timesteps": T([44, 239], "int64"),
        },
    ),
    "HunyuanDiT2DModel": (
        {
            "sample_size": 8,
            "patch_size": 2,
            "in_channels": 4,
            "num_layers": 1,
            "attention_head_dim": 8,
            "num_attention_heads": 2,
            "cross_attention_dim": 8,
            "cross_attention_dim_t5": 8,
            "pooled_projection_dim": 4,
            "hidden_size": 16,
            "text_len": 4,
            "text_len_t5": 4,
            "activation_fn": "gelu-approximate",
        },
        {
            "hidden_states": R((2, 4, 8, 8)),
            "encoder_hidden_states": R((2, 4, 8)),
            "text_embedding_mask": F((2, 4), 1.0),
            "encoder_hidden_states_t5": R((2, 4, 8)),
            "text_embedding_mask_t5": F((2, 4), 1.0),
            "timestep": T([44.0, 239.0]),
            "image_meta_size": T([[1024.0, 1024.0, 16.0, 16.0, 0.0, 0.0], [1024.0, 1024.0, 16.0, 16.0, 0.0, 0.0]]),
            "style": F((2,), 0, "int64"),
            "image_rotary_emb": [F((1, 8), 1.0), F((1, 8), 0.0)],
        },
    ),
    "HunyuanVideo15Transformer3DModel": (
        {
            "in_channels": 4,
            "out_channels": 4,
            "num_attention_heads": 2,
            "attention_head_dim": 8,
            "num_layers": 1,
            "num_refiner_layers": 1,
            "mlp_ratio": 2.0,
            "patch_size": 1,
            "patch_size_t": 1,
            "text_embed_dim": 16,
            "text_embed_2_dim": 8,
            "image_embed_dim": 12,
            "rope_axes_dim": (2, 2, 4),
            "target_size": 16,
            "task_type": "t2v",
        },
        {
            "hidden_states": R((1, 4, 1, 8, 8)),
            "timestep": T([1.0]),
            "encoder_hidden_states": R((1, 6, 16)),
            "encoder_hidden_states_2": R((1, 4, 8)),
            "encoder_attention_mask": F((1, 6), 1.0),
            "encoder_attention_mask_2": F((1, 4), 1.0),
            "image_embeds": F((1, 3, 12), 0.0),
        },
    ),
    "HunyuanVideoFramepackTransformer3DModel": (
        {
            "in_channels": 4,
            "out_channels": 4,
            "num_attention_heads": 2,
            "attention_head_dim": 10,
            "num_layers": 1,
            "num_single_layers": 1,
            "num_refiner_layers": 1,
            "patch_size": 2,
            "patch_size_t": 1,
            "guidance_embeds": True,
            "text_embed_dim": 16,
            "pooled_projection_dim": 8,
            "rope_axes_dim": (2, 4, 4),
            "image_condition_type": None,
            "has_image_proj": True,
            "image_proj_dim": 16,
            "has_clean_x_embedder": True,
        },
        {
            "hidden_states": R((1, 4, 3, 4, 4)),
            "timestep": T([44], "int64"),
            "encoder_hidden_states": R((1, 12, 16)),
            "pooled_projections": R((1, 8)),
            "encoder_attention_mask": F((1, 12), 1.0),
            "guidance": T([44], "int64"),
            "image_embeds": R((1, 12, 16)),
            "indices_latents": F((3,), 1.0),
            "latents_clean": R((1, 4, 2, 4, 4)),
            "indices_latents_clean": F((2,), 1.0),
            "latents_history_2x": R((1, 4, 2, 4, 4)),
            "indices_latents_history_2x": F((2,), 1.0),
            "latents_history_4x": R((1, 4, 8, 4, 4)),
            "indices_latents_history_4x": F((8,), 1.0),
        },
    ),
    "HunyuanVideoTransformer3DModel": (
        {
            "in_channels": 4,
            "out_channels": 4,
            "num_attention_heads": 2,
            "attention_head_dim": 10,
            "num_layers": 1,
            "num_single_layers": 1,
            "num_refiner_layers": 1,
            "patch_size": 1,
            "patch_size_t": 1,
            "guidance_embeds": True,
            "text_embed_dim": 16,
            "pooled_projection_dim": 8,
            "rope_axes_dim": (2, 4, 4),
            "image_condition_type": None,
        },
        {
            "hidden_states": R((1, 4, 1, 16, 16)),
            "timestep": T([44.0]),
            "encoder_hidden_states": R((1, 12, 16)),
            "pooled_projections": R((1, 8)),
            "encoder_attention_mask": F((1, 12), 1.0),
            "guidance": T([44.0]),
        },
    ),
    "Ideogram4Transformer2DModel": (
        {
            "in_channels": 16,
            "num_layers": 1,
            "attention_head_dim": 8,
            "num_attention_heads": 4,
            "intermediate_size": 32,
            "adaln_dim": 16,
            "llm_features_dim": 24,
            "rope_theta": 10000,
            "mrope_section": (2, 1, 1),
            "norm_eps": 1e-05,
        },
        {
            "hidden_states": R((1, 8, 16)),
            "encoder_hidden_states": R((1, 8, 24)),
            "timestep": T([0.5]),
            "position_ids": T(
                [
                    [
                        [0, 0, 0],
                        [1, 1, 1],
                        [2, 2, 2],
                        [3, 3, 3],
                        [65536, 65536, 65536],
                        [65536, 65536, 65537],
                        [65536, 65537, 65536],
                        [65536, 65537, 65537],
                    ]
                ],
                "int64",
            ),
            "segment_ids": F((1, 8), 1, "int64"),
            "indicator": T([[3, 3, 3, 3, 2, 2, 2, 2]], "int64"),
        },
    ),
    "JoyImageEditPlusTransformer3DModel": (
        {
            "patch_size": [1, 2, 2],
            "in_channels": 16,
            "hidden_size": 32,
            "num_attention_heads": 2,
            "text_dim": 16,
            "num_layers": 1,
            "rope_dim_list": [4, 6, 6],
            "theta": 256,
        },
        {
            "hidden_states": R((1, 2, 16, 1, 2, 2)),
            "encoder_hidden_states": R((1, 12, 16)),
            "timestep": T([1.0]),
            "shape_list": [
                [
                    (
                        1,
                        1,
                        1,
                    ),
                    (
                        1,
                        1,
                        1,
                    ),
                ]
            ],
        },
    ),
    "JoyImageEditTransformer3DModel": (
        {
            "patch_size": [1, 2, 2],
            "in_channels": 16,
            "hidden_size": 32,
            "num_attention_heads": 2,
            "text_dim": 16,
            "num_layers": 1,
            "rope_dim_list": [4, 6, 6],
            "theta": 256,
        },
        {"hidden_states": R((1, 16, 1, 4, 4)), "encoder_hidden_states": R((1, 12, 16)), "timestep": T([1.0])},
    ),
    "Krea2Transformer2DModel": (
        {
            "in_channels": 16,
            "num_layers": 1,
            "attention_head_dim": 8,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "intermediate_size": 32,
            "timestep_embed_dim": 8,
            "text_hidden_dim": 16,
            "num_text_layers": 3,
            "text_num_attention_heads": 2,
            "text_num_key_value_heads": 1,
            "text_intermediate_size": 16,
            "num_layerwise_text_blocks": 1,
            "num_refiner_text_blocks": 1,
            "axes_dims_rope": (4, 2, 2),
            "rope_theta": 1000.0,
            "norm_eps": 1e-05,
        },
        {
            "hidden_states": R((1, 4, 16)),
            "encoder_hidden_states": R((1, 4, 3, 16)),
            "timestep": T([0.5]),
            "position_ids": T(
                [
                    [0.0, 0.0, 0.0],
                    [0.0, 0.0, 0.0],
                    [0.0, 0.0, 0.0],
                    [0.0, 0.0, 0.0],
                    [0.0, 0.0, 0.0],
                    [0.0, 0.0, 1.0],
                    [0.0, 1.0, 0.0],
                    [0.0, 1.0, 1.0],
                ]
            ),
            "encoder_attention_mask": T([[True, True, True, False]], "bool"),
        },
    ),
    "LTX2VideoTransformer3DModel": (
        {
            "in_channels": 4,
            "out_channels": 4,
            "patch_size": 1,
            "patch_size_t": 1,
            "num_attention_heads": 2,
            "attention_head_dim": 8,
            "cross_attention_dim": 16,
            "audio_in_channels": 4,
            "audio_out_channels": 4,
            "audio_num_attention_heads": 2,
            "audio_attention_head_dim": 4,
            "audio_cross_attention_dim": 8,
            "num_layers": 1,
            "qk_norm": "rms_norm_across_heads",
            "caption_channels": 16,
            "rope_double_precision": False,
        },
        {
            "hidden_states": R((2, 512, 4)),
            "audio_hidden_states": R((2, 9, 4)),
            "encoder_hidden_states": R((2, 16, 16)),
            "audio_encoder_hidden_states": R((2, 16, 16)),
            "timestep": T([1540.99609375, 293.42889404296875]),
            "encoder_attention_mask": F((2, 16), True, "bool"),
            "num_frames": 2,
            "height": 16,
            "width": 16,
            "audio_num_frames": 9,
            "fps": 25.0,
        },
    ),
    "LTXVideoTransformer3DModel": (
        {
            "in_channels": 4,
            "out_channels": 4,
            "num_attention_heads": 2,
            "attention_head_dim": 8,
            "cross_attention_dim": 16,
            "num_layers": 1,
            "qk_norm": "rms_norm_across_heads",
            "caption_channels": 16,
        },
        {
            "hidden_states": R((2, 512, 4)),
            "encoder_hidden_states": R((2, 16, 16)),
            "timestep": T([44, 239], "int64"),
            "encoder_attention_mask": F((2, 16), True, "bool"),
            "num_frames": 2,
            "height": 16,
            "width": 16,
        },
    ),
    "LatteTransformer3DModel": (
        {
            "sample_size": 8,
            "num_layers": 1,
            "patch_size": 2,
            "attention_head_dim": 4,
            "num_attention_heads": 2,
            "caption_channels": 8,
            "in_channels": 4,
            "cross_attention_dim": 8,
            "out_channels": 8,
            "attention_bias": True,
            "activation_fn": "gelu-approximate",
            "num_embeds_ada_norm": 1000,
            "norm_type": "ada_norm_single",
            "norm_elementwise_affine": False,
            "norm_eps": 1e-06,
        },
        {
            "hidden_states": R((2, 4, 1, 8, 8)),
            "encoder_hidden_states": R((2, 8, 8)),
            "timestep": T([44, 239], "int64"),
            "enable_temporal_attentions": True,
        },
    ),
    "LongCatAudioDiTTransformer": (
        {"dit_dim": 64, "dit_depth": 2, "dit_heads": 4, "dit_text_dim": 32, "latent_dim": 8, "text_conv": False},
        {
            "hidden_states": R((1, 16, 8)),
            "encoder_hidden_states": R((1, 10, 32)),
            "encoder_attention_mask": F((1, 10), True, "bool"),
            "attention_mask": F((1, 16), True, "bool"),
            "timestep": T([1.0]),
        },
    ),
    "LongCatImageTransformer2DModel": (
        {
            "patch_size": 1,
            "in_channels": 4,
            "num_layers": 1,
            "num_single_layers": 1,
            "attention_head_dim": 16,
            "num_attention_heads": 2,
            "joint_attention_dim": 32,
            "pooled_projection_dim": 32,
            "axes_dims_rope": [4, 4, 8],
        },
        {
            "hidden_states": R((1, 16, 4)),
            "encoder_hidden_states": R((1, 48, 32)),
            "img_ids": R((16, 3)),
            "txt_ids": R((48, 3)),
            "timestep": T([1.0]),
            "guidance": T([3.5]),
        },
    ),
    "Lumina2Transformer2DModel": (
        {
            "sample_size": 16,
            "patch_size": 2,
            "in_channels": 4,
            "hidden_size": 24,
            "num_layers": 1,
            "num_refiner_layers": 1,
            "num_attention_heads": 3,
            "num_kv_heads": 1,
            "multiple_of": 2,
            "ffn_dim_multiplier": None,
            "norm_eps": 1e-05,
            "scaling_factor": 1.0,
            "axes_dim_rope": (4, 2, 2),
            "axes_lens": (128, 128, 128),
            "cap_feat_dim": 32,
        },
        {
            "hidden_states": R((2, 4, 16, 16)),
            "encoder_hidden_states": R((2, 16, 32)),
            "timestep": T([0.49625658988952637, 0.7682217955589294]),
            "encoder_attention_mask": F((2, 16), True, "bool"),
        },
    ),
    "LuminaNextDiT2DModel": (
        {
            "sample_size": 16,
            "patch_size": 2,
            "in_channels": 4,
            "hidden_size": 24,
            "num_layers": 1,
            "num_attention_heads": 3,
            "num_kv_heads": 1,
            "multiple_of": 16,
            "ffn_dim_multiplier": None,
            "norm_eps": 1e-05,
            "learn_sigma": False,
            "qk_norm": True,
            "cross_attention_dim": 32,
            "scaling_factor": 1.0,
        },
        {
            "hidden_states": R((2, 4, 16, 16)),
            "encoder_hidden_states": R((2, 16, 32)),
            "timestep": T([0.49625658988952637, 0.7682217955589294]),
            "encoder_mask": R((2, 16)),
            "image_rotary_emb": R((384, 384, 4)),
            "cross_attention_kwargs": {},
        },
    ),
    "MiniMaxH3Transformer3DModel": (
        {
            "num_attention_heads": 2,
            "attention_head_dim": 16,
            "hidden_size": 24,
            "num_layers": 1,
            "num_refiner_layers": 1,
            "ffn_dim": 32,
            "in_channels": 4,
            "audio_in_channels": 6,
            "patch_size": (1, 2, 2),
            "text_dim": 8,
            "freq_dim": 8,
            "time_embed_hidden_dim": 24,
            "time_embed_dim": 16,
            "rope_freq_dim": 2,
        },
        {
            "hidden_states": R((2, 8, 16)),
            "audio_hidden_states": R((2, 6, 6)),
            "encoder_hidden_states": R((2, 4, 8)),
            "timestep": T([0.699999988079071, 0.30000001192092896]),
            "timestep_indices": T([0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0], "int64"),
            "token_tags": T([1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0], "int64"),
            "position_ids": T(
                [
                    [0.0, 0.0, 0.0],
                    [1.0, 0.0, 0.0],
                    [2.0, 0.0, 0.0],
                    [3.0, 0.0, 0.0],
                    [4.0, 0.0, 0.0],
                    [5.0, 0.0, 0.0],
                    [6.0, 0.0, 0.0],
                    [7.0, 0.0, 0.0],
                    [8.0, 0.0, 0.0],
                    [9.0, 0.0, 0.0],
                    [10.0, 0.0, 0.0],
                    [11.0, 1.0, 1.0],
                    [12.0, 2.0, 0.0],
                    [13.0, 3.0, 1.0],
                    [14.0, 0.0, 0.0],
                    [15.0, 1.0, 1.0],
                    [16.0, 2.0, 0.0],
                    [17.0, 3.0, 1.0],
                ]
            ),
            "video_indices": T([10, 11, 12, 13, 14, 15, 16, 17], "int64"),
            "audio_indices": T([4, 5, 6, 7, 8, 9], "int64"),
            "text_indices": T([0, 1, 2, 3], "int64"),
        },
    ),
    "MiniMaxMusic3Transformer1DModel": (
        {
            "in_channels": 8,
            "condition_dim": 16,
            "num_layers": 1,
            "num_attention_heads": 2,
            "attention_head_dim": 8,
            "ff_inner_dim": 32,
            "rotary_dim": 4,
            "fourier_embedding_dim": 8,
        },
        {"hidden_states": R((1, 8, 24)), "encoder_hidden_states": R((1, 24, 16)), "timestep": T([0.5])},
    ),
    "MochiTransformer3DModel": (
        {
            "patch_size": 2,
            "num_attention_heads": 2,
            "attention_head_dim": 8,
            "num_layers": 1,
            "pooled_projection_dim": 16,
            "in_channels": 4,
            "out_channels": None,
            "qk_norm": "rms_norm",
            "text_embed_dim": 16,
            "time_embed_dim": 4,
            "activation_fn": "swiglu",
            "max_sequence_length": 16,
        },
        {
            "hidden_states": R((2, 4, 2, 16, 16)),
            "encoder_hidden_states": R((2, 16, 16)),
            "timestep": T([44, 239], "int64"),
            "encoder_attention_mask": F((2, 16), True, "bool"),
        },
    ),
    "MotifVideoTransformer3DModel": (
        {
            "in_channels": 33,
            "out_channels": 16,
            "num_attention_heads": 2,
            "attention_head_dim": 12,
            "num_layers": 1,
            "num_single_layers": 1,
            "num_decoder_layers": 0,
            "mlp_ratio": 4.0,
            "patch_size": 1,
            "patch_size_t": 1,
            "qk_norm": "rms_norm",
            "norm_type": "layer_norm",
            "text_embed_dim": 32,
            "image_embed_dim": 4,
            "rope_theta": 256.0,
            "rope_axes_dim": (4, 4, 4),
            "enable_text_cross_attention_dual": False,
            "enable_text_cross_attention_single": False,
        },
        {"hidden_states": R((1, 33, 9, 16, 16)), "encoder_hidden_states": R((1, 12, 32)), "timestep": T([44], "int64")},
    ),
    "NucleusMoEImageTransformer2DModel": (
        {
            "patch_size": 2,
            "in_channels": 16,
            "out_channels": 4,
            "num_layers": 1,
            "attention_head_dim": 16,
            "num_attention_heads": 4,
            "joint_attention_dim": 16,
            "axes_dims_rope": (8, 4, 4),
            "moe_enabled": False,
            "capacity_factors": [8.0, 8.0],
        },
        {
            "hidden_states": R((1, 16, 16)),
            "encoder_hidden_states": R((1, 8, 16)),
            "encoder_hidden_states_mask": F((1, 8), 1, "int64"),
            "timestep": T([1.0]),
            "img_shapes": [
                (
                    1,
                    4,
                    4,
                )
            ],
        },
    ),
    "OmniGenTransformer2DModel": (
        {
            "hidden_size": 16,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "intermediate_size": 32,
            "num_layers": 1,
            "pad_token_id": 0,
            "vocab_size": 1000,
            "in_channels": 4,
            "time_step_dim": 4,
            "rope_scaling": {"long_factor": [1, 2], "short_factor": [1, 2]},
        },
        {
            "hidden_states": R((2, 4, 8, 8)),
            "timestep": T([0.49625658988952637, 0.7682217955589294]),
            "input_ids": T(
                [
                    [4, 9, 3, 0, 3, 9, 7, 3, 7, 3, 1, 6, 6, 9, 8, 6, 6, 8, 4, 3, 6, 9, 1, 4],
                    [4, 1, 9, 9, 9, 0, 1, 2, 3, 0, 5, 5, 2, 9, 1, 8, 8, 3, 6, 9, 1, 7, 3, 5],
                ],
                "int64",
            ),
            "input_img_latents": [R((1, 4, 8, 8))],
            "input_image_sizes": {0: [[0, 16]]},
            "attention_mask": F((2, 41, 41), 1.0),
            "position_ids": T(
                [
                    [
                        0,
                        1,
                        2,
                        3,
                        4,
                        5,
                        6,
                        7,
                        8,
                        9,
                        10,
                        11,
                        12,
                        13,
                        14,
                        15,
                        16,
                        17,
                        18,
                        19,
                        20,
                        21,
                        22,
                        23,
                        24,
                        25,
                        26,
                        27,
                        28,
                        29,
                        30,
                        31,
                        32,
                        33,
                        34,
                        35,
                        36,
                        37,
                        38,
                        39,
                        40,
                    ],
                    [
                        0,
                        1,
                        2,
                        3,
                        4,
                        5,
                        6,
                        7,
                        8,
                        9,
                        10,
                        11,
                        12,
                        13,
                        14,
                        15,
                        16,
                        17,
                        18,
                        19,
                        20,
                        21,
                        22,
                        23,
                        24,
                        25,
                        26,
                        27,
                        28,
                        29,
                        30,
                        31,
                        32,
                        33,
                        34,
                        35,
                        36,
                        37,
                        38,
                        39,
                        40,
                    ],
                ],
                "int64",
            ),
        },
    ),
    "OvisImageTransformer2DModel": (
        {
            "patch_size": 1,
            "in_channels": 4,
            "out_channels": 4,
            "num_layers": 1,
            "num_single_layers": 1,
            "attention_head_dim": 16,
            "num_attention_heads": 2,
            "joint_attention_dim": 32,
            "axes_dims_rope": (4, 4, 8),
        },
        {
            "hidden_states": R((1, 16, 4)),
            "encoder_hidden_states": R((1, 48, 32)),
            "img_ids": R((16, 3)),
            "txt_ids": R((48, 3)),
            "timestep": T([1.0]),
        },
    ),
    "PRXTransformer2DModel": (
        {
            "in_channels": 16,
            "patch_size": 2,
            "context_in_dim": 1792,
            "hidden_size": 1792,
            "mlp_ratio": 3.5,
            "num_heads": 28,
            "depth": 1,
            "axes_dim": [32, 32],
            "theta": 10000,
        },
        {"hidden_states": R((1, 16, 16, 16)), "encoder_hidden_states": R((1, 16, 1792)), "timestep": T([1.0])},
    ),
    "PixArtTransformer2DModel": (
        {
            "sample_size": 8,
            "num_layers": 1,
            "patch_size": 2,
            "attention_head_dim": 2,
            "num_attention_heads": 2,
            "in_channels": 4,
            "cross_attention_dim": 8,
            "out_channels": 8,
            "attention_bias": True,
            "activation_fn": "gelu-approximate",
            "num_embeds_ada_norm": 8,
            "norm_type": "ada_norm_single",
            "norm_elementwise_affine": False,
            "norm_eps": 1e-06,
            "use_additional_conditions": False,
            "caption_channels": None,
        },
        {
            "hidden_states": R((4, 4, 8, 8)),
            "timestep": T([44, 239, 933, 760], "int64"),
            "encoder_hidden_states": R((4, 8, 8)),
            "added_cond_kwargs": {"aspect_ratio": None, "resolution": None},
        },
    ),
    "PriorTransformer": (
        {
            "num_attention_heads": 2,
            "attention_head_dim": 4,
            "num_layers": 1,
            "embedding_dim": 8,
            "num_embeddings": 7,
            "additional_embeddings": 4,
        },
        {"hidden_states": R((4, 8)), "timestep": 2, "proj_embedding": R((4, 8)), "encoder_hidden_states": R((4, 7, 8))},
    ),
    "QwenImageTransformer2DModel": (
        {
            "patch_size": 2,
            "in_channels": 16,
            "out_channels": 4,
            "num_layers": 1,
            "attention_head_dim": 16,
            "num_attention_heads": 4,
            "joint_attention_dim": 16,
            "guidance_embeds": False,
            "axes_dims_rope": (8, 4, 4),
        },
        {
            "hidden_states": R((1, 16, 16)),
            "encoder_hidden_states": R((1, 8, 16)),
            "encoder_hidden_states_mask": F((1, 8), 1, "int64"),
            "timestep": T([1.0]),
            "img_shapes": [
                (
                    1,
                    4,
                    4,
                )
            ],
        },
    ),
    "SD3Transformer2DModel": (
        {
            "sample_size": 32,
            "patch_size": 1,
            "in_channels": 4,
            "num_layers": 1,
            "attention_head_dim": 8,
            "num_attention_heads": 4,
            "caption_projection_dim": 32,
            "joint_attention_dim": 32,
            "pooled_projection_dim": 64,
            "out_channels": 4,
            "pos_embed_max_size": 96,
            "dual_attention_layers": (),
            "qk_norm": None,
        },
        {
            "hidden_states": R((2, 4, 32, 32)),
            "encoder_hidden_states": R((2, 154, 32)),
            "pooled_projections": R((2, 64)),
            "timestep": T([44, 239], "int64"),
        },
    ),
    "SanaTransformer2DModel": (
        {
            "patch_size": 1,
            "in_channels": 4,
            "out_channels": 4,
            "num_layers": 1,
            "attention_head_dim": 4,
            "num_attention_heads": 2,
            "num_cross_attention_heads": 2,
            "cross_attention_head_dim": 4,
            "cross_attention_dim": 8,
            "caption_channels": 8,
            "sample_size": 32,
        },
        {"hidden_states": R((2, 4, 32, 32)), "encoder_hidden_states": R((2, 8, 8)), "timestep": T([44, 239], "int64")},
    ),
    "SanaVideoTransformer3DModel": (
        {
            "in_channels": 16,
            "out_channels": 16,
            "num_attention_heads": 2,
            "attention_head_dim": 12,
            "num_layers": 1,
            "num_cross_attention_heads": 2,
            "cross_attention_head_dim": 12,
            "cross_attention_dim": 24,
            "caption_channels": 16,
            "mlp_ratio": 2.5,
            "dropout": 0.0,
            "attention_bias": False,
            "sample_size": 8,
            "patch_size": (1, 2, 2),
            "norm_elementwise_affine": False,
            "norm_eps": 1e-06,
            "qk_norm": "rms_norm_across_heads",
            "rope_max_seq_len": 32,
        },
        {"hidden_states": R((1, 16, 2, 16, 16)), "encoder_hidden_states": R((1, 12, 16)), "timestep": T([44], "int64")},
    ),
    "SkyReelsV2Transformer3DModel": (
        {
            "patch_size": (1, 2, 2),
            "num_attention_heads": 2,
            "attention_head_dim": 12,
            "in_channels": 4,
            "out_channels": 4,
            "text_dim": 16,
            "freq_dim": 256,
            "ffn_dim": 32,
            "num_layers": 1,
            "cross_attn_norm": True,
            "qk_norm": "rms_norm_across_heads",
            "rope_max_seq_len": 32,
        },
        {"hidden_states": R((1, 4, 2, 16, 16)), "encoder_hidden_states": R((1, 12, 16)), "timestep": T([44], "int64")},
    ),
    "StableAudio3DiTModel": (
        {
            "io_channels": 8,
            "patch_size": 1,
            "embed_dim": 32,
            "depth": 1,
            "num_heads": 4,
            "cond_token_dim": 16,
            "global_cond_dim": 12,
            "local_add_cond_dim": 5,
            "timestep_features_dim": 16,
            "ff_mult": 2,
            "num_memory_tokens": 3,
            "use_differential_attention": False,
        },
        {
            "hidden_states": R((2, 8, 16)),
            "timestep": T([0.00442582368850708, 0.7256969809532166]),
            "encoder_hidden_states": R((2, 4, 16)),
            "global_hidden_states": R((2, 12)),
        },
    ),
    "TransformerTemporalModel": (
        {"num_attention_heads": 8, "attention_head_dim": 4, "in_channels": 4, "num_layers": 1, "norm_num_groups": 1},
        {"hidden_states": R((2, 4, 32, 32)), "timestep": T([44, 239], "int64")},
    ),
    "WanAnimate2Transformer3DModel": (
        {
            "patch_size": (1, 2, 2),
            "text_len": 16,
            "in_dim": 36,
            "dim": 128,
            "ffn_dim": 256,
            "freq_dim": 64,
            "text_dim": 32,
            "out_dim": 16,
            "num_heads": 4,
            "num_layers": 1,
            "cross_attn_norm": True,
            "use_img_emb": True,
        },
        {
            "hidden_states": [R((16, 2, 4, 4))],
            "timestep": T([1.0]),
            "encoder_hidden_states": [R((8, 32))],
            "condition_latents": [R((20, 2, 4, 4))],
            "encoder_hidden_states_image": R((1, 4, 1280)),
            "kv_cache": None,
            "kv_cache_mode": "extract",
            "seq_len": 8,
            "offset_grid_sizes": F((1, 3), 2, "int64"),
        },
    ),
    "WanAnimateTransformer3DModel": (
        {
            "patch_size": (1, 2, 2),
            "num_attention_heads": 2,
            "attention_head_dim": 12,
            "in_channels": 12,
            "latent_channels": 4,
            "out_channels": 4,
            "text_dim": 16,
            "freq_dim": 256,
            "ffn_dim": 32,
            "num_layers": 1,
            "cross_attn_norm": True,
            "qk_norm": "rms_norm_across_heads",
            "image_dim": 16,
            "rope_max_seq_len": 32,
            "motion_encoder_channel_sizes": {"4": 16, "8": 16, "16": 16},
            "motion_encoder_size": 16,
            "motion_style_dim": 8,
            "motion_dim": 4,
            "motion_encoder_dim": 16,
            "face_encoder_hidden_dim": 16,
            "face_encoder_num_heads": 2,
            "inject_face_latents_blocks": 2,
        },
        {
            "hidden_states": R((1, 12, 21, 16, 16)),
            "timestep": T([44], "int64"),
            "encoder_hidden_states": R((1, 12, 16)),
            "encoder_hidden_states_image": R((1, 12, 16)),
            "pose_hidden_states": R((1, 4, 20, 16, 16)),
            "face_pixel_values": R((1, 3, 77, 16, 16)),
        },
    ),
    "WanTransformer3DModel": (
        {
            "patch_size": (1, 2, 2),
            "num_attention_heads": 2,
            "attention_head_dim": 12,
            "in_channels": 4,
            "out_channels": 4,
            "text_dim": 16,
            "freq_dim": 256,
            "ffn_dim": 32,
            "num_layers": 1,
            "cross_attn_norm": True,
            "qk_norm": "rms_norm_across_heads",
            "rope_max_seq_len": 32,
        },
        {"hidden_states": R((1, 4, 2, 16, 16)), "encoder_hidden_states": R((1, 12, 16)), "timestep": T([44], "int64")},
    ),
    "WanVACETransformer3DModel": (
        {
            "patch_size": (1, 2, 2),
            "num_attention_heads": 2,
            "attention_head_dim": 12,
            "in_channels": 16,
            "out_channels": 16,
            "text_dim": 32,
            "freq_dim": 256,
            "ffn_dim": 32,
            "num_layers": 1,
            "cross_attn_norm": True,
            "qk_norm": "rms_norm_across_heads",
            "rope_max_seq_len": 32,
            "vace_layers": [0, 2],
            "vace_in_channels": 48,
        },
        {
            "hidden_states": R((1, 16, 2, 16, 16)),
            "encoder_hidden_states": R((1, 12, 32)),
            "control_hidden_states": R((1, 48, 2, 16, 16)),
            "timestep": T([44], "int64"),
        },
    ),
    "ZImageTransformer2DModel": (
        {
            "all_patch_size": (2,),
            "all_f_patch_size": (1,),
            "in_channels": 16,
            "dim": 16,
            "n_layers": 1,
            "n_refiner_layers": 1,
            "n_heads": 1,
            "n_kv_heads": 2,
            "qk_norm": True,
            "cap_feat_dim": 16,
            "rope_theta": 256.0,
            "t_scale": 1000.0,
            "axes_dims": [8, 4, 4],
            "axes_lens": [256, 32, 32],
        },
        {"x": [R((16, 1, 16, 16))], "cap_feats": [R((16, 16))], "t": T([0.0])},
    ),
}


# ---- classes diffusers' tests do not cover, configured here -------------------------------------

MODELS.update(
    {
        # The SANA-WM refiner on one block of 2 latent frames of 4 x 4, its rotary embedding from the model.
        "SanaWMLTX2RefinerTransformer3DModel": (
            {
                "in_channels": 4,
                "out_channels": 4,
                "num_attention_heads": 2,
                "attention_head_dim": 8,
                "cross_attention_dim": 16,
                "num_layers": 1,
                "caption_channels": 16,
                "audio_num_attention_heads": 2,
                "audio_attention_head_dim": 4,
                "audio_cross_attention_dim": 8,
                "audio_in_channels": 4,
                "audio_out_channels": 4,
            },
            {
                "hidden_states": R((1, 32, 4)),
                "encoder_hidden_states": R((1, 6, 16)),
                "timestep": F((1, 32), 500.0),
                "video_rotary_emb": FromModel(
                    lambda m: m.build_rotary_emb_for_absolute_positions(1, [0, 1], 4, 4, torch.device("cpu"), 25.0)
                ),
                "encoder_attention_mask": K([4], 6, "int64"),
            },
        ),
        # SANA-WM without camera conditions, every block a softmax-attention block (softmax_every_n 1); the
        # timestep per frame, [B, 1, T].
        "SanaWMTransformer3DModel": (
            {
                "in_channels": 4,
                "num_layers": 1,
                "hidden_size": 32,
                "num_attention_heads": 2,
                "softmax_every_n": 1,
                "linear_head_dim": 16,
                "chunk_plucker_post_attn_blocks": 1,
                "image_size": 8,
                "caption_channels": 16,
                "mixed_precision": "fp32",
            },
            {
                "hidden_states": R((1, 4, 2, 8, 8)),
                "timestep": T([[[500.0, 400.0]]]),
                "encoder_hidden_states": R((1, 6, 16)),
                "mask": K([4], 6, "int64"),
            },
        ),
        "BriaFibo2Transformer2DModel": (
            {
                "in_channels": 4,
                "patch_size": 2,
                "dim": 32,
                "n_layers": 1,
                "n_refiner_layers": 1,
                "n_heads": 2,
                "cap_feat_dim": 16,
                "injection_layer_ids": (0,),
                "perceiver_num_layers": 1,
                "min_num_gist_tokens": 4,
                "max_num_gist_tokens": 8,
                "gist_step": 4,
                "gist_min_text_len": 4,
                "gist_max_text_len": 16,
                "axes_dims": (4, 6, 6),
                "axes_lens": (64, 32, 32),
            },
            # text features of the first layer and of each injection layer: [B, 1 + len(injection_layer_ids), S, C]
            {
                "hidden_states": R((1, 4, 8, 8)),
                "timestep": T([0.5]),
                "encoder_hidden_states": R((1, 2, 6, 16)),
                "encoder_attention_mask": K([4], 6),
            },
        ),
        "DreamLiteTransformer2DModel": (
            {
                "num_attention_heads": 2,
                "attention_head_dim": 8,
                "in_channels": 4,
                "num_layers": 1,
                "norm_num_groups": 2,
                "cross_attention_dim": 8,
            },
            {"hidden_states": R((2, 4, 8, 8)), "encoder_hidden_states": R((2, 5, 8))},
        ),
        "Flux3Transformer2DModel": (
            {
                "in_channels": 4,
                "cond_in_channels": 4,
                "num_layers": 1,
                "num_single_layers": 1,
                "attention_head_dim": 16,
                "num_attention_heads": 2,
                "joint_attention_dim": 16,
                "timestep_channels": 16,
                "axes_dims_rope": (4, 4, 4, 4),
            },
            {
                "hidden_states": R((1, 16, 4)),
                "encoder_hidden_states": R((1, 6, 16)),
                "timestep": T([0.5]),
                "img_ids": T([[0, y, x, 0] for y in range(4) for x in range(4)]),
                "txt_ids": F((6, 4), 0.0),
            },
        ),
        "HunyuanImageTransformer2DModel": (
            {
                "in_channels": 4,
                "out_channels": 4,
                "num_attention_heads": 2,
                "attention_head_dim": 8,
                "num_layers": 1,
                "num_single_layers": 1,
                "num_refiner_layers": 1,
                "patch_size": (1, 1),
                "text_embed_dim": 16,
                "rope_axes_dim": (4, 4),
            },
            {
                "hidden_states": R((1, 4, 8, 8)),
                "timestep": T([10.0]),
                "encoder_hidden_states": R((1, 6, 16)),
                "encoder_attention_mask": K([4], 6, "int64"),
            },
        ),
        "Kandinsky5Transformer3DModel": (
            {
                "in_visual_dim": 4,
                "in_text_dim": 16,
                "in_text_dim2": 8,
                "time_dim": 16,
                "out_visual_dim": 4,
                "patch_size": (1, 2, 2),
                "model_dim": 32,
                "ff_dim": 64,
                "num_text_blocks": 1,
                "num_visual_blocks": 1,
                "axes_dims": (8, 4, 4),
            },
            {
                "hidden_states": R((1, 2, 8, 8, 4)),
                "encoder_hidden_states": R((1, 6, 16)),
                "timestep": T([500.0]),
                "pooled_projections": R((1, 8)),
                "visual_rope_pos": (T([0, 1], "int64"), T([0, 1, 2, 3], "int64"), T([0, 1, 2, 3], "int64")),
                "text_rope_pos": T([0, 1, 2, 3, 4, 5], "int64"),
            },
        ),
        "Kandinsky6Transformer3DModel": (
            {
                "in_visual_dim": 4,
                "out_visual_dim": 4,
                "in_text_dim": 16,
                "in_text_dim2": 8,
                "time_dim": 16,
                "patch_size": (1, 2, 2),
                "model_dim": 32,
                "ff_dim": 64,
                "num_text_blocks": 1,
                "num_visual_blocks": 1,
                "axes_dims": (8, 4, 4),
                "visual_cond": False,
            },
            {
                "hidden_states": R((1, 2, 8, 8, 4)),
                "encoder_hidden_states": R((1, 6, 16)),
                "pooled_projections": R((1, 8)),
                "timestep": T([500.0]),
            },
        ),
        "Kandinsky6SRTransformer3DModel": (
            {
                "in_visual_dim": 4,
                "out_visual_dim": 4,
                "time_dim": 16,
                "patch_size": (1, 1, 1),
                "model_dim": 32,
                "ff_dim": 64,
                "num_visual_blocks": 1,
                "axes_dims": (8, 4, 4),
            },
            {"hidden_states": R((1, 2, 8, 8, 9)), "timestep": T([500.0])},
        ),
        "MiniMaxMusic3RVQDepthDecoder": (
            {
                "hidden_size": 16,
                "num_layers": 1,
                "num_attention_heads": 2,
                "intermediate_size": 32,
                "audio_vocab_size": 8,
                "num_codebooks": 4,
                "max_position_embeddings": 16,
            },
            {"inputs_embeds": R((2, 4, 16))},
        ),
        "StableAudioDiTModel": (
            {
                "sample_size": 8,
                "in_channels": 4,
                "num_layers": 1,
                "attention_head_dim": 8,
                "num_attention_heads": 2,
                "num_key_value_attention_heads": 1,
                "out_channels": 4,
                "cross_attention_dim": 16,
                "time_proj_dim": 8,
                "global_states_input_dim": 8,
                "cross_attention_input_dim": 8,
            },
            {
                "hidden_states": R((2, 4, 8)),
                "timestep": T([10, 500], "int64"),
                "encoder_hidden_states": R((2, 5, 8)),
                "global_hidden_states": R((2, 1, 8)),
                "encoder_attention_mask": K([5, 3], 5),
            },
        ),
        "T5FilmDecoder": (
            {
                "input_dims": 4,
                "targets_length": 8,
                "d_model": 16,
                "num_layers": 1,
                "num_heads": 2,
                "d_kv": 8,
                "d_ff": 32,
                "dropout_rate": 0.0,
            },
            {
                "encodings_and_masks": [(R((2, 6, 16)), K([6, 4], 6))],
                "decoder_input_tokens": R((2, 8, 4)),
                "decoder_noise_time": T([0.3, 0.6]),
            },
        ),
        "Transformer2DModel": (
            {
                "num_attention_heads": 2,
                "attention_head_dim": 8,
                "in_channels": 4,
                "num_layers": 1,
                "norm_num_groups": 2,
                "cross_attention_dim": 8,
            },
            {
                "hidden_states": R((2, 4, 8, 8)),
                "encoder_hidden_states": R((2, 5, 8)),
                "encoder_attention_mask": K([5, 3], 5, "int64"),
            },
        ),
        # Qwen-Image 2.1: text with one condition image (4 tokens, one slot of the VLM sequence) and the target
        # image (8 tokens), prefilled block-causally: the text segments attend causally (bottom-right) over every key
        # before them, each image block bidirectionally; padded prompt keys dropped.
        "QwenImage21Transformer2DModel": (
            {
                "patch_size": 1,
                "in_channels": 4,
                "out_channels": 4,
                "num_layers": 1,
                "attention_head_dim": 16,
                "num_attention_heads": 2,
                "context_in_dim": 8,
                "mlp_ratio": 2,
                "axes_dims_rope": (4, 6, 6),
            },
            {
                "hidden_states": R((2, 12, 4)),
                "encoder_hidden_states": R((2, 6, 8)),
                "timestep": T([0.3, 0.7]),
                "img_shapes": [[(1, 2, 2), (1, 2, 4)]] * 2,
                "img_mask": T([[False, False, True, False, False, False, True, True]] * 2, "bool"),
                "encoder_hidden_states_mask": K([6, 4], 6),
            },
        ),
    }
)

# Smaller sizes than diffusers' tests use, where those make a test slow: (config, inputs) changes.
SMALLER: Dict[str, Tuple[Dict[str, Any], Dict[str, Any]]] = {
    "AnyFlowFARTransformer3DModel": ({}, {"hidden_states": R((1, 4, 4, 8, 8))}),
    "AuraFlowTransformer2DModel": ({}, {"hidden_states": R((2, 4, 16, 16)), "encoder_hidden_states": R((2, 32, 32))}),
    # The padding mask needs torchvision; the learnable position embedding has no float64 path (a float32 norm).
    "CosmosTransformer3DModel": ({"concat_padding_mask": False, "extra_pos_embed_type": None}, {"padding_mask": None}),
    "LTX2VideoTransformer3DModel": ({}, {"hidden_states": R((2, 128, 4)), "height": 8, "width": 8}),
    "PRXTransformer2DModel": (
        {"hidden_size": 64, "num_heads": 2, "axes_dim": [16, 16], "context_in_dim": 64},
        {"encoder_hidden_states": R((1, 16, 64))},
    ),
    "SanaTransformer2DModel": ({}, {"hidden_states": R((2, 4, 16, 16))}),
    "SD3Transformer2DModel": ({}, {"hidden_states": R((2, 4, 16, 16)), "encoder_hidden_states": R((2, 32, 32))}),
    "SkyReelsV2Transformer3DModel": ({}, {"hidden_states": R((1, 4, 2, 8, 8))}),
    "TransformerTemporalModel": ({}, {"hidden_states": R((2, 4, 16, 16))}),
    # 5 latent frames instead of 21 (the pose has one fewer, the face video 4 per pose frame less 3).
    "WanAnimateTransformer3DModel": (
        {"num_layers": 2},  # inject_face_latents_blocks: 2
        {
            "hidden_states": R((1, 12, 5, 8, 8)),
            "pose_hidden_states": R((1, 4, 4, 8, 8)),
            "face_pixel_values": R((1, 3, 13, 16, 16)),
        },
    ),
    "WanVACETransformer3DModel": ({"vace_layers": [0]}, {}),
    "WanAnimate2Transformer3DModel": ({}, {"kv_cache": lambda: wan_animate2_cache()}),
}


def wan_animate2_cache():
    from diffusers.models.transformers.transformer_wan_animate_2 import WanAnimate2KVCache

    return WanAnimate2KVCache(1)


# Variants: another configuration of a class (its name before the "/").
MODELS["WanTransformer3DModel/i2v"] = (
    # Wan 2.1 image-to-video with a short prompt: its processor cuts the image context at len - 512, which
    # leaves it empty (seq_kv 0): SDPA's answer (zeros), not an error.
    {**MODELS["WanTransformer3DModel"][0], "image_dim": 16, "added_kv_proj_dim": 24},
    {**MODELS["WanTransformer3DModel"][1], "encoder_hidden_states_image": R((1, 4, 16))},
)

# ---- inputs whose masks have padding, causal parts or segments (the tests' masks are all ones) ----

MASKED: Dict[str, Dict[str, Any]] = {
    "CosmosTransformer3DModel": {"attention_mask": K([8], 12, "float32")},
    "HunyuanDiT2DModel": {
        "text_embedding_mask": K([4, 2], 4, "float32"),
        "text_embedding_mask_t5": K([3, 4], 4, "float32"),
    },
    "HunyuanVideo15Transformer3DModel": {
        "encoder_attention_mask": K([4], 6, "float32"),
        "encoder_attention_mask_2": K([3], 4, "float32"),
    },
    "HunyuanVideoFramepackTransformer3DModel": {"encoder_attention_mask": K([8], 12, "float32")},
    "HunyuanVideoTransformer3DModel": {"encoder_attention_mask": K([8], 12, "float32")},
    "Ideogram4Transformer2DModel": {"segment_ids": T([[0, 0, 1, 1, 1, 1, 2, 2]], "int64")},
    "Krea2Transformer2DModel": {"encoder_attention_mask": T([[True, True, False, False]], "bool")},
    "LTX2VideoTransformer3DModel": {"encoder_attention_mask": K([16, 9], 16, "float32")},
    "LTXVideoTransformer3DModel": {"encoder_attention_mask": K([16, 9], 16, "float32")},
    "LongCatAudioDiTTransformer": {"encoder_attention_mask": K([6], 10), "attention_mask": K([12], 16)},
    "Lumina2Transformer2DModel": {"encoder_attention_mask": K([16, 5], 16)},
    "MochiTransformer3DModel": {"encoder_attention_mask": K([16, 7], 16)},
    "NucleusMoEImageTransformer2DModel": {"encoder_hidden_states_mask": K([5], 8, "int64")},
    "OmniGenTransformer2DModel": {"attention_mask": omnigen_mask},
    "QwenImageTransformer2DModel": {"encoder_hidden_states_mask": K([5], 8, "int64")},
}

# Classes that fall back somewhere, with why (the test asserts exactly these reasons).
KNOWN_FALLBACKS: Dict[str, Tuple[str, ...]] = {}

# Classes whose float64 reference (PyTorch's own attention) cannot run a backward on the CPU: forward only.
FORWARD_ONLY: Dict[str, str] = {
    "AnyFlowFARTransformer3DModel": "its processors call flex_attention (backend 'flex'), which has no CPU backward",
    "Kandinsky6SRTransformer3DModel": "its sparse attention is flex_attention, which has no CPU backward",
}

# Classes whose attention never reaches diffusers' dispatcher or SDPA, with why: nothing to route.
NOT_ROUTED: Dict[str, str] = {
    "T5FilmDecoder": "scale_qk=False: diffusers' AttnProcessor computes its attention itself (baddbmm, softmax)",
    "Kandinsky6SRTransformer3DModel": "its processors call flex_attention itself (nabla sparse attention)",
}

# Classes whose float32 models attend in bf16 (they cast q, k and v themselves), run with upcast=True.
UPCAST: Dict[str, str] = {
    "SanaWMTransformer3DModel": "its softmax blocks cast q, k and v to bf16 before calling SDPA",
}

# Classes that cannot be built tiny here, with why (skipped).
UNBUILDABLE: Dict[str, str] = {
    "RFD4ProteinaTransformer": "a protein structure model (pair representations, atom37 features): no tiny config here",
}

# The models issue 35 names: served with no fallback, whatever else changes.
REQUIRED = ("SD3Transformer2DModel", "Lumina2Transformer2DModel", "CogView4Transformer2DModel",
            "HiDreamImageTransformer2DModel", "PixArtTransformer2DModel", "SanaTransformer2DModel",
            "MochiTransformer3DModel", "CogVideoXTransformer3DModel", "LTXVideoTransformer3DModel",
            "LTX2VideoTransformer3DModel", "HunyuanVideo15Transformer3DModel", "Cosmos3OmniTransformer",
            "QwenImage21Transformer2DModel")  # fmt: skip


def all_classes() -> Dict[str, type]:
    """Every model class of diffusers.models.transformers (ModelMixin subclasses defined there)."""
    import importlib
    import inspect
    import pkgutil

    from diffusers.models import transformers
    from diffusers.models.modeling_utils import ModelMixin

    found = {}
    for info in pkgutil.iter_modules(transformers.__path__):
        module = importlib.import_module(f"{transformers.__name__}.{info.name}")
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, ModelMixin) and obj.__module__ == module.__name__:
                found[name] = obj
    return found


def materialise(spec: Any, g: torch.Generator) -> Any:
    """The inputs of a spec: R(...) drawn from g, tensors copied, containers rebuilt."""
    if isinstance(spec, tuple) and len(spec) == 3 and spec[0] == "R":
        return torch.randn(spec[1], generator=g).to(getattr(torch, spec[2]))
    if isinstance(spec, torch.Tensor):
        return spec.clone()
    if isinstance(spec, list):
        return [materialise(x, g) for x in spec]
    if isinstance(spec, tuple):
        return tuple(materialise(x, g) for x in spec)
    if isinstance(spec, dict):
        return {k: materialise(v, g) for k, v in spec.items()}
    if callable(spec):
        return spec()
    return spec


def cast(x: Any, dtype: torch.dtype) -> Any:
    """Floating tensors in x cast to dtype."""
    if isinstance(x, torch.Tensor):
        return x.to(dtype) if x.is_floating_point() else x
    if isinstance(x, (list, tuple)):
        return type(x)(cast(y, dtype) for y in x)
    if isinstance(x, dict):
        return {k: cast(v, dtype) for k, v in x.items()}
    return x


def tensors(x: Any) -> list:
    """The floating tensors of a model's output, in order."""
    if isinstance(x, torch.Tensor):
        return [x] if x.is_floating_point() else []
    if hasattr(x, "to_tuple"):
        x = x.to_tuple()
    if isinstance(x, (list, tuple)):
        return [t for y in x for t in tensors(y)]
    if isinstance(x, dict):
        return [t for y in x.values() for t in tensors(y)]
    return []


def forward_backward(model, inputs, weights=None, backward: bool = True):
    """The model's outputs (flattened, detached) and its parameters' gradients of sum(w * out)
    (an empty tensor without ``backward``)."""
    model.zero_grad(set_to_none=True)
    if not backward:
        with torch.no_grad():
            outs = tensors(model(**inputs))
        return torch.cat([o.flatten() for o in outs]), torch.zeros(0, dtype=outs[0].dtype), weights
    outs = tensors(model(**inputs))
    if weights is None:
        g = torch.Generator().manual_seed(1)
        weights = [torch.randn(o.shape, generator=g, dtype=torch.float64) for o in outs]
    loss = sum((o * w.to(o.dtype)).sum() for o, w in zip(outs, weights))
    loss.backward()
    grads = [p.grad.flatten() for p in model.parameters() if p.grad is not None]
    grad = torch.cat(grads) if grads else torch.zeros(0)
    return torch.cat([o.detach().flatten() for o in outs]), grad.detach(), weights


def backward_within_gate(m: dict) -> bool:
    return (
        m["finite"]
        and m["rel_l2"] <= BWD_GATE_REL_L2
        and m["max_abs"] <= BWD_GATE_MAX_ABS * max(1.0, m["max_ref"])
        and m["cos"] >= BWD_GATE_COS
    )


# PyTorch's own attention, taken before any test turns the switch on (the reference of served_calls_exact).
TORCH_SDPA = torch.nn.functional.scaled_dot_product_attention


def record_served_calls(name: str, r: dict) -> list:
    """The float32 model of ``r`` run under the switch again, recording each call jattn served: SDPA's
    arguments as the routers handed them to jattn (``_plan``'s), jattn's call (``_run``'s), the inputs
    (detached) and the gradient that reached its output. None where a call is not one this check
    models (not float32, or returning the lse)."""
    from jattn import diffusers as switch

    calls, pending, plan, run = [], {}, switch._plan, switch._run

    def planning(q, k, v, layout, attn_mask, dropout_p, is_causal, scale, enable_gqa):
        pending["args"] = (attn_mask, is_causal, scale, enable_gqa)
        return plan(q, k, v, layout, attn_mask, dropout_p, is_causal, scale, enable_gqa)

    def running(q, k, v, layout, call, return_lse):
        out = run(q, k, v, layout, call, return_lse)
        if isinstance(out, torch.Tensor):
            c = {"qkv": tuple(x.detach().clone() for x in (q, k, v)), "layout": layout, "call": call,
                 "args": pending["args"], "out": out.detach().clone(), "grad": None, "lse": return_lse}  # fmt: skip
            if out.requires_grad:
                out.register_hook(lambda g, c=c: c.__setitem__("grad", g.detach().clone()))
            calls.append(c)
        return out

    switch._plan, switch._run = planning, running
    try:
        with switch.enabled(upcast=name in UPCAST), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            forward_backward(r["model"], r["inputs"], r["weights"], name not in FORWARD_ONLY)
    finally:
        switch._plan, switch._run = plan, run
    if any(c["lse"] or c["qkv"][0].dtype is not torch.float32 for c in calls):
        return None
    return calls


def served_calls_exact(name: str, r: dict) -> bool:
    """Whether every attention call jattn served in the model met its own contract there: its output
    within the f32 gate, and its dq, dk, dv for the gradient that reached it within the backward's
    gate, each against PyTorch's attention in float64 on the call's own arguments (mask, causal,
    scale, grouped heads as the model passed them), or no further off than PyTorch's float32
    attention on that call. Where every call meets it and the model still misses its gates, the
    model amplified float32 rounding (a parameter gradient summing cancelling terms): one draw of
    PyTorch's rounding against one of jattn's, through that amplification, is a coin toss (ConsisID:
    jattn's gradients 1.5x past SDPA's in 28 of 1500 draws, SDPA's past jattn's in 13; each call's
    own errors below SDPA's)."""
    from jattn import diffusers as switch

    calls = record_served_calls(name, r)
    if not calls:
        return False
    for c in calls:
        mask, is_causal, scale, gqa = c["args"]
        bhsd = (lambda x: x.transpose(1, 2)) if c["layout"] == "bshd" else (lambda x: x)

        def torch_attention(q, k, v, mask=mask, is_causal=is_causal, scale=scale, gqa=gqa, bhsd=bhsd):
            if isinstance(mask, torch.Tensor) and mask.is_floating_point():
                mask = mask.to(q.dtype)
            out = TORCH_SDPA(bhsd(q), bhsd(k), bhsd(v), attn_mask=mask, is_causal=is_causal, scale=scale,
                             enable_gqa=gqa)  # fmt: skip
            return bhsd(out)

        def served(q, k, v, c=c):
            return switch._run(q, k, v, c["layout"], c["call"], False)

        def out_and_grads(fn, dtype):
            qkv = [x.to(dtype).clone().requires_grad_(c["grad"] is not None) for x in c["qkv"]]
            out = fn(*qkv)
            if c["grad"] is None:
                return [out.detach()]
            return [out.detach(), *torch.autograd.grad(out, qkv, c["grad"].to(dtype))]

        ref, ours, sdpa = (out_and_grads(fn, dt) for fn, dt in ((torch_attention, torch.float64),
                                                                 (served, torch.float32),
                                                                 (torch_attention, torch.float32)))  # fmt: skip
        for i, (o, s_, r_) in enumerate(zip(ours, sdpa, ref)):
            m, ms = metrics(o.numpy(), r_.numpy()), metrics(s_.numpy(), r_.numpy())
            gate = within_f32_gate(m) if i == 0 else m["rel_l2"] == 0 or backward_within_gate(m)
            if not (gate or (m["finite"] and m["rel_l2"] <= 1.5 * ms["rel_l2"] + 1e-9)):
                return False
    return True


RESULTS: Dict[str, dict] = {}


def run_model(name: str, seed: int) -> dict:
    """One class: float64 forward and backward on PyTorch's attention, then float32 under the switch."""
    init, spec = MODELS[name]
    more_init, more_inputs = SMALLER.get(name, ({}, {}))
    init = {**init, **more_init}
    spec = {**spec, **more_inputs, **MASKED.get(name, {})}
    cls = getattr(diffusers, name.split("/")[0])
    torch.manual_seed(seed % 2**31)
    model = cls(**init).float().eval()
    model64 = copy.deepcopy(model).double()
    for module in model64.modules():  # float32 made inside a forward (MotifVideo's timestep projection)
        if isinstance(module, torch.nn.Linear):
            module.register_forward_pre_hook(lambda _, args: cast(args, torch.float64))
    inputs = materialise(spec, torch.Generator().manual_seed(seed % 2**31))
    inputs = {k: (v.make(model) if isinstance(v, FromModel) else v) for k, v in inputs.items()}
    backward = name not in FORWARD_ONLY
    out64, grad64, weights = forward_backward(model64, cast(copy.deepcopy(inputs), torch.float64), None, backward)
    jattn.diffusers.reset_counts()
    with jattn.diffusers.enabled(upcast=name in UPCAST), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out32, grad32, _ = forward_backward(model, inputs, weights, backward)
    counts = jattn.diffusers.counts()
    result = {"counts": counts, "out": metrics(out32.numpy(), out64.numpy()),
              "grad": metrics(grad32.numpy(), grad64.numpy()), "model": model, "inputs": inputs,
              "weights": weights, "grad64": grad64, "out64": out64}  # fmt: skip
    return result


@pytest.fixture(autouse=True)
def switch_off():
    jattn.diffusers.disable()
    jattn.diffusers.reset_counts()
    yield
    jattn.diffusers.disable()
    jattn.diffusers.reset_counts()


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Tiny models: one torch thread is faster than several (and much faster on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("name", sorted(set(all_classes()) | set(MODELS)))
def test_model_under_the_switch(name, seed):
    if name in UNBUILDABLE:
        pytest.skip(UNBUILDABLE[name])
    if name not in MODELS:
        pytest.fail(f"{name}: a class of diffusers with no tiny config here (add it to MODELS or UNBUILDABLE)")
    r = run_model(name, seed)
    counts = r["counts"]
    served = sum(v for k, v in counts.items() if k.startswith("jattn"))
    fallbacks = tuple(sorted(k[len("fallback:") :] for k in counts if k.startswith("fallback:")))
    RESULTS[name] = {"counts": counts, "out": r["out"], "grad": r["grad"], "backward": name not in FORWARD_ONLY}
    print(f"\n{name}: {counts} out rel_l2 {r['out']['rel_l2']:.1e} grad rel_l2 {r['grad']['rel_l2']:.1e}")
    if name in NOT_ROUTED:
        assert not counts, f"{name}: {counts}"
    else:
        assert served > 0, f"{name}: no attention call reached jattn: {counts}"
    assert fallbacks == KNOWN_FALLBACKS.get(name, ()), f"{name}: {counts}"
    out_ok, grad_ok = within_f32_gate(r["out"]), r["grad"]["rel_l2"] == 0 or backward_within_gate(r["grad"])
    if not (out_ok and grad_ok):
        # Then no worse than the same float32 model on PyTorch's attention: a model whose own float32
        # layers miss the gate (StableAudioDiT at some seeds: 8e-6 either way) is not jattn's miss; or,
        # where one draw of rounding against another says otherwise, every call jattn served within its
        # own contract in the model (served_calls_exact).
        out_sdpa, grad_sdpa, _ = forward_backward(r["model"], r["inputs"], r["weights"], name not in FORWARD_ONLY)
        worse = []
        for what, ours, sdpa_out, ref in (
            ("output", r["out"], out_sdpa, r["out64"]),
            ("gradients", r["grad"], grad_sdpa, r["grad64"]),
        ):
            sdpa = metrics(sdpa_out.numpy(), ref.numpy())
            if not (ours["finite"] and ours["rel_l2"] <= 1.5 * sdpa["rel_l2"] + 1e-9):
                worse.append(f"{what} {ours} vs {sdpa}")
        assert not worse or served_calls_exact(name, r), (
            f"{name}: outside the gate, worse than the float32 model on SDPA, and a call jattn served outside its "
            f"contract: {'; '.join(worse)}"
        )
        RESULTS[name]["sdpa_out"] = metrics(out_sdpa.numpy(), r["out64"].numpy())


def within_f32_gate(m: dict) -> bool:
    """The f32 gate of docs/DESIGN.md section 2."""
    return m["finite"] and m["rel_l2"] <= 2e-6 and m["max_abs"] <= 1e-5 * max(1.0, m["max_ref"]) and m["cos"] >= 0.99999


def test_required_models_are_listed():
    for name in REQUIRED:
        assert name in MODELS and name not in UNBUILDABLE and name not in KNOWN_FALLBACKS, name


def test_the_table():
    """Prints the served/total table of python/README.md (run the file with -s); the other tests
    assert what it shows."""
    names = sorted(set(all_classes()) | set(MODELS))
    if any(n not in RESULTS and n not in UNBUILDABLE for n in names):
        pytest.skip("the table needs every model of this file (run it whole)")
    classes = sorted(all_classes())
    built = [n for n in classes if n in RESULTS]
    served = [
        n for n in built if n not in NOT_ROUTED and not any(k.startswith("fallback:") for k in RESULTS[n]["counts"])
    ]
    print(
        f"\n{len(served)} of {len(classes)} classes served with no fallback; {len(built)} built, "
        f"{len(NOT_ROUTED)} whose attention reaches neither the dispatcher nor SDPA, {len(UNBUILDABLE)} not built"
    )
    print("| class | calls | output rel_l2 | gradients rel_l2 |\n| --- | --- | ---: | ---: |")
    for n in names:
        if n in UNBUILDABLE:
            print(f"| {n} | not built: {UNBUILDABLE[n]} | | |")
            continue
        r = RESULTS[n]
        calls = ", ".join(f"{k} {v}" for k, v in sorted(r["counts"].items())) or f"none ({NOT_ROUTED.get(n, '')})"
        grad = f"{r['grad']['rel_l2']:.1e}" if r["backward"] else "forward only"
        out = f"{r['out']['rel_l2']:.1e}"
        if "sdpa_out" in r:
            out += f" (on SDPA {r['sdpa_out']['rel_l2']:.1e})"
        print(f"| {n} | {calls} | {out} | {grad} |")
