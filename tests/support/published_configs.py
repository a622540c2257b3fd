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
}
