"""What a model costs before it runs: the modules that describe a transformer and its training step.

- ``config`` — :class:`TransformerConfig`, the shape of a decoder-only transformer (GPT-2, Llama, Mistral, Qwen2,
  Mixtral), and ``hf_config``, which reads a Hugging Face ``config.json`` into one;
- ``flops`` — a training step's matmul FLOPs and its time at a given MFU;
- ``attention_kernels`` — which kernel ``scaled_dot_product_attention`` runs for a call (flash, memory-efficient,
  cuDNN or math), asked of torch where it can answer;
- ``activations`` — the bytes a step saves for backward, term by term, for the kernel that runs;
- ``training_memory`` — parameters, gradients, optimizer state and activations under a precision policy: the peak;
- ``sharding`` — model states per device under DDP, ZeRO and FSDP;
- ``traced_step`` — a training step of any ``nn.Module`` measured on the meta device.

The public names are re-exported by :mod:`accounting`:

>>> from accounting import TransformerConfig, transformer_flops
>>> config = TransformerConfig(layers=2, width=64, heads=4, sequence_length=32, vocabulary=128)
>>> step = transformer_flops(config, batch_size=1)
>>> step.backward == 2 * step.forward                  # the backward pass multiplies twice as much
True
"""
