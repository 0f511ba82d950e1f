"""The ways a trained span model runs: torch (bf16, fp32) and onnxruntime (fp32, int8).

- :mod:`~structqa.runtimes.graph`: the model as a function of batch tensors (what is exported);
- :mod:`~structqa.runtimes.onnx_export`, :mod:`~structqa.runtimes.hf_export`: `structqa export`
  to ONNX and to a transformers ``BertForQuestionAnswering`` directory;
- :mod:`~structqa.runtimes.onnx_model`: an exported graph behind the torch model's call;
- :mod:`~structqa.runtimes.select`: which runtime answers for a path (``--runtime auto``).
"""
