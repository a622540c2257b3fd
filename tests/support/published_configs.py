"""Full-size ``config.json`` files as published on the Hugging Face Hub, and the parameter counts published with them.

Each entry is the file as its repository serves it (keys written by the ``transformers`` of the
day, harmless ones included, so that ``TransformerConfig.from_hf`` reads real files), with the
exact parameter count the Hub states for the checkpoint (its ``safetensors`` total, the sum of
the stored tensors' elements) where one is known.
"""

PUBLISHED = {
    # source: https://huggingface.co/openai-community/gpt2/blob/main/config.json
    # No exact total is published on the Hub for this old checkpoint; nanoGPT (karpathy/nanoGPT, model.py,
    # get_num_params) prints 123.65M for it *without* the 1024 x 768 position table: 123,653,376 + 786,432.
    "gpt2": (
        {
            "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
            "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
            "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
            "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "summary_activation": None,
            "summary_first_dropout": 0.1, "summary_proj_to_labels": True, "summary_type": "cls_index",
            "summary_use_proj": True, "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
            "vocab_size": 50257,
        },
        None,
    ),
    # source: https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json; count: the Hub's
    # safetensors total, 8,030,261,248 (model.safetensors.index.json: total_size 16060522496 bytes of bf16).
    "llama-3-8b": (
        {
            "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
            "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 8192,
            "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
            "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 500000.0,
            "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.40.0.dev0",
            "use_cache": True, "vocab_size": 128256,
        },
        8_030_261_248,
    ),
    # source: https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json; count: the Hub's
    # safetensors total, 7,241,732,096 (model.safetensors.index.json: total_size 14483464192 bytes of bf16).
    "mistral-7b-v0.1": (
        {
            "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
            "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
            "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32,
            "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
            "sliding_window": 4096, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
            "transformers_version": "4.34.0.dev0", "use_cache": True, "vocab_size": 32000,
        },
        7_241_732_096,
    ),
    # source: https://huggingface.co/Qwen/Qwen2-0.5B/blob/main/config.json; count: the Hub's safetensors
    # total, 494,032,768 (the embedding tied, counted once).
    "qwen2-0.5b": (
        {
            "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
            "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
            "intermediate_size": 4864, "max_position_embeddings": 131072, "max_window_layers": 24,
            "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
            "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": True,
            "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": True,
            "use_sliding_window": False, "vocab_size": 151936,
        },
        494_032_768,
    ),
    # source: https://huggingface.co/Qwen/Qwen2-7B/blob/main/config.json; count: the Hub's safetensors total,
    # 7,615,616,512.
    "qwen2-7b": (
        {
            "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
            "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
            "intermediate_size": 18944, "max_position_embeddings": 131072, "max_window_layers": 28,
            "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
            "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16", "transformers_version": "4.37.2", "use_cache": True,
            "use_sliding_window": False, "vocab_size": 152064,
        },
        7_615_616_512,
    ),
    # source: https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json; count: the Hub's
    # safetensors total, 46,702,792,704.
    "mixtral-8x7b": (
        {
            "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
            "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
            "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32,
            "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
            "output_router_logits": False, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
            "router_aux_loss_coef": 0.02, "sliding_window": None, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16", "transformers_version": "4.36.0.dev0", "use_cache": True, "vocab_size": 32000,
        },
        46_702_792_704,
    ),
    # source: https://huggingface.co/Qwen/Qwen3-0.6B/blob/main/config.json; count: the Hub's safetensors total,
    # 596,049,920 before the tied unembedding (the embedding counted once).
    "qwen3-0.6b": (
        {
            "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
            "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
            "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
            "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
            "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": True,
            "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": True,
            "use_sliding_window": False, "vocab_size": 151936,
        },
        596_049_920,
    ),
    # source: https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json; count: the Hub's safetensors total.
    "qwen3-8b": (
        {
            "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
            "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 12288,
            "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
            "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
            "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": True,
            "use_sliding_window": False, "vocab_size": 151936,
        },
        8_190_735_360,
    ),
    # source: https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json; count: the Hub's safetensors total
    # (30.5B total, 3.3B activated on the model card, both embeddings counted as active).
    "qwen3-30b-a3b": (
        {
            "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
            "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144,
            "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [],
            "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": True,
            "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
            "num_key_value_heads": 4, "output_router_logits": False, "rms_norm_eps": 1e-06, "rope_scaling": None,
            "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": None,
            "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
            "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
        },
        30_532_122_624,
    ),
    # source: https://huggingface.co/google/gemma-2-9b/blob/main/config.json; count: the Hub's safetensors total
    # (the embedding tied, counted once).
    "gemma-2-9b": (
        {
            "architectures": ["Gemma2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": 1,
            "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
            "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3584, "initializer_range": 0.02,
            "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "gemma2",
            "num_attention_heads": 16, "num_hidden_layers": 42, "num_key_value_heads": 8, "pad_token_id": 0,
            "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096,
            "sliding_window_size": 4096, "torch_dtype": "float32", "transformers_version": "4.42.0.dev0",
            "use_cache": True, "vocab_size": 256000,
        },
        9_241_705_984,
    ),
    # source: https://huggingface.co/google/gemma-3-1b-pt/blob/main/config.json; count: the Hub's safetensors total.
    "gemma-3-1b": (
        {
            "architectures": ["Gemma3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "attn_logit_softcapping": None, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": 1,
            "final_logit_softcapping": None, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
            "hidden_size": 1152, "initializer_range": 0.02, "intermediate_size": 6912,
            "max_position_embeddings": 32768, "model_type": "gemma3_text", "num_attention_heads": 4,
            "num_hidden_layers": 26, "num_key_value_heads": 1, "pad_token_id": 0, "query_pre_attn_scalar": 256,
            "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000, "rope_scaling": None, "rope_theta": 1000000,
            "sliding_window": 512, "sliding_window_pattern": 6, "torch_dtype": "bfloat16",
            "transformers_version": "4.50.0.dev0", "use_cache": True, "vocab_size": 262144,
        },
        999_885_952,
    ),
    # source: https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json (its auto_map names remote code
    # that transformers does not run: it builds deepseek_v3 itself). count: the main model as transformers builds it (routers' e_score_correction_bias
    # buffers not counted; the Hub's 685B adds the 14B multi-token-prediction module and the FP8 scales).
    "deepseek-v3": (
        {
            "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                         "AutoModel": "modeling_deepseek.DeepseekV3Model",
                         "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"},
            "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3,
            "hidden_act": "silu", "hidden_size": 7168, "initializer_range": 0.02, "intermediate_size": 18432,
            "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v3",
            "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
            "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 128, "num_experts_per_tok": 8,
            "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
            "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
            "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                    "weight_block_size": [128, 128]},
            "rms_norm_eps": 1e-06,
            "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                             "original_max_position_embeddings": 4096, "type": "yarn"},
            "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": True,
            "tie_word_embeddings": False, "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
            "transformers_version": "4.33.1", "use_cache": True, "v_head_dim": 128, "vocab_size": 129280,
        },
        671_026_404_352,
    ),
    # source: https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json;
    # count: the Hub's safetensors total.
    "deepseek-v2-lite": (
        {
            "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV2Config",
                         "AutoModel": "modeling_deepseek.DeepseekV2Model",
                         "AutoModelForCausalLM": "modeling_deepseek.DeepseekV2ForCausalLM"},
            "aux_loss_alpha": 0.001, "bos_token_id": 100000, "eos_token_id": 100001, "first_k_dense_replace": 1,
            "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 10944,
            "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v2",
            "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64,
            "n_shared_experts": 2, "norm_topk_prob": False, "num_attention_heads": 16, "num_experts_per_tok": 6,
            "num_hidden_layers": 27, "num_key_value_heads": 16, "pretraining_tp": 1, "q_lora_rank": None,
            "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
            "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
                             "original_max_position_embeddings": 4096, "type": "yarn"},
            "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax", "seq_aux": True,
            "tie_word_embeddings": False, "topk_group": 1, "topk_method": "greedy", "torch_dtype": "bfloat16",
            "transformers_version": "4.33.1", "use_cache": True, "v_head_dim": 128, "vocab_size": 102400,
        },
        15_706_484_224,
    ),
    # source: https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json; count: the model card's 20.9B total,
    # 3.6B active (unembedding counted, embedding not), as bf16 weights (the checkpoint stores experts in MXFP4).
    "gpt-oss-20b": (
        {
            "architectures": ["GptOssForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
            "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu",
            "hidden_size": 2880, "initial_context_length": 4096, "initializer_range": 0.02,
            "intermediate_size": 2880, "layer_types": ["sliding_attention", "full_attention"] * 12,
            "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
            "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32,
            "output_router_logits": False, "pad_token_id": 199999,
            "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                               "model.embed_tokens", "lm_head"],
                                    "quant_method": "mxfp4"},
            "rms_norm_eps": 1e-05,
            "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                             "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": False},
            "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
            "tie_word_embeddings": False, "transformers_version": "4.55.0.dev0", "use_cache": True,
            "vocab_size": 201088,
        },
        20_914_757_184,
    ),
    # source: https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json; count: as gpt-oss-20b's.
    "gpt-oss-120b": (
        {
            "architectures": ["GptOssForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
            "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu",
            "hidden_size": 2880, "initial_context_length": 4096, "initializer_range": 0.02,
            "intermediate_size": 2880, "layer_types": ["sliding_attention", "full_attention"] * 18,
            "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
            "num_experts_per_tok": 4, "num_hidden_layers": 36, "num_key_value_heads": 8, "num_local_experts": 128,
            "output_router_logits": False, "pad_token_id": 199999,
            "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                               "model.embed_tokens", "lm_head"],
                                    "quant_method": "mxfp4"},
            "rms_norm_eps": 1e-05,
            "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                             "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": False},
            "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
            "tie_word_embeddings": False, "transformers_version": "4.55.0.dev0", "use_cache": True,
            "vocab_size": 201088,
        },
        116_829_156_672,
    ),
    # source: https://huggingface.co/microsoft/Phi-3-mini-4k-instruct/blob/main/config.json (transformers
    # builds phi3 itself, whatever its auto_map names); count: the Hub's safetensors total.
    "phi-3-mini": (
        {
            "_name_or_path": "Phi-3-mini-4k-instruct", "architectures": ["Phi3ForCausalLM"],
            "attention_bias": False, "attention_dropout": 0.0,
            "auto_map": {"AutoConfig": "configuration_phi3.Phi3Config",
                         "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM"},
            "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 3072,
            "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 4096,
            "model_type": "phi3", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
            "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0,
            "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0, "sliding_window": 2047,
            "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.40.2",
            "use_cache": True, "vocab_size": 32064,
        },
        3_821_079_552,
    ),
    # source: https://huggingface.co/microsoft/phi-4/blob/main/config.json; count: the Hub's safetensors total.
    "phi-4": (
        {
            "architectures": ["Phi3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "bos_token_id": 100257, "embd_pdrop": 0.0, "eos_token_id": 100265, "hidden_act": "silu",
            "hidden_size": 5120, "initializer_range": 0.02, "intermediate_size": 17920,
            "max_position_embeddings": 16384, "model_type": "phi3", "num_attention_heads": 40,
            "num_hidden_layers": 40, "num_key_value_heads": 10, "original_max_position_embeddings": 16384,
            "pad_token_id": 100349, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_scaling": None,
            "rope_theta": 250000, "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
            "transformers_version": "4.47.0", "use_cache": True, "vocab_size": 100352,
        },
        14_659_507_200,
    ),
    # source: https://huggingface.co/allenai/OLMo-2-1124-7B/blob/main/config.json; no exact total is stated
    # with the checkpoint (the card says 7B): the count is transformers' model only.
    "olmo-2-7b": (
        {
            "architectures": ["Olmo2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "eos_token_id": 100257, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
            "intermediate_size": 11008, "max_position_embeddings": 4096, "model_type": "olmo2",
            "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "pad_token_id": 100277,
            "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 500000, "tie_word_embeddings": False,
            "torch_dtype": "float32", "transformers_version": "4.47.0.dev0", "use_cache": True,
            "vocab_size": 100352,
        },
        None,
    ),
}

_GEMMA3_VISION = {
    "hidden_size": 1152, "image_size": 896, "intermediate_size": 4304, "model_type": "siglip_vision_model",
    "num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": False,
}
_GEMMA3_COMPOSITE = {
    "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999, "eoi_token_index": 256000,
    "eos_token_id": [1, 106], "image_token_index": 262144, "initializer_range": 0.02, "mm_tokens_per_image": 256,
    "model_type": "gemma3", "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
    "vision_config": _GEMMA3_VISION,
}
PUBLISHED_MULTIMODAL = {
    # Gemma 3's multimodal checkpoints: the text model nested in text_config, which leaves out the sizes equal to
    # Gemma3TextConfig's defaults (4b: its 8 heads, 4 key/value heads, vocabulary 262,208, head_dim 256), beside
    # a SigLIP vision tower. source: https://huggingface.co/google/gemma-3-4b-pt/blob/main/config.json and
    # https://huggingface.co/google/gemma-3-12b-pt/blob/main/config.json (written here from their published
    # shape); count: the Hub's safetensors total, text model, vision tower and projector together.
    "gemma-3-4b": (
        _GEMMA3_COMPOSITE | {"text_config": {
            "hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text", "num_hidden_layers": 34,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024}},
        4_300_079_472,
    ),
    "gemma-3-12b": (
        _GEMMA3_COMPOSITE | {"text_config": {
            "hidden_size": 3840, "intermediate_size": 15360, "model_type": "gemma3_text", "num_attention_heads": 16,
            "num_hidden_layers": 48, "num_key_value_heads": 8, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "sliding_window": 1024}},
        12_187_325_040,
    ),
}
