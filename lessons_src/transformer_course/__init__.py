"""Helper package of the course *Transformers from scratch in PyTorch*.

Each chapter of the course builds one idea and keeps the result here, so that
later chapters can import it instead of typing it again.  The modules are small
and flat (in the spirit of nanoGPT's ``model.py``); import from them directly,
e.g.::

    from transformer_course.attention import MultiHeadAttention
    from transformer_course.masking import causal_mask, padding_mask

Where each idea lives:

================  =================================================  ==========
module            what it holds                                      chapter
================  =================================================  ==========
``utils``         ``set_seed``, ``get_device``, ``check_token_ids``,  all
                  ``Table`` (results as an HTML table)
``plotting``      figure defaults, attention heatmaps with token     all
                  labels
``pretrained``    ``load_minilm``, ``load_smollm2`` (offline,        02, 05,
                  verified)                                          11-13
``positional``    sinusoidal ``PositionalEncoding``                  03
``attention``     ``scaled_dot_product_attention``,                  04, 05
                  ``MultiHeadAttention``
``layers``        ``LayerNorm``, ``PositionwiseFeedForward``         06
``transformer``   encoder/decoder layers and stacks,                 07
                  ``Transformer``
``masking``       ``padding_mask``, ``causal_mask``,                 08
                  ``combine_masks``
``training``      the one training loop ``fit``, ``History``,        09, 10, 12
                  schedule
``tokenization``  ``CharTokenizer``, one token per character         09, 10, 11
``seq2seq``       teacher forcing, sequence loss, greedy decoding    09
``gpt``           ``GPT``: ``CausalSelfAttention``, ``MLP``,         10, 11
                  ``Block``
``generation``    ``generate``: greedy, temperature, top-k, top-p    10, 11
``train_gpt``     batches, evaluation, training and checkpoints of   10, 11
                  GPT
``train_mlm``     data, held-out score and checkpoint of the         12
                  masked LM
``hf_gpt2``       ``to_hf`` / ``from_hf`` (GPT-2 both ways), BPE     11
``llama``         ``Llama``: ``RMSNorm``, ``rope``, GQA              11
                  ``Attention``, ``SwiGLU``; ``from_hf_llama``
``bert``          ``BertEncoder``, ``BertForMLM``, masking,          12, 13
                  pre-training
``hf_bert``       BERT weights both ways, WordPiece tokenisers       12, 13
``interpret``     attention as flow, attention rollout, occlusion    12, 13
``instruct``      chat examples with answer-only labels, LoRA        14
``diagrams``      the chapters' architecture diagrams                01-12
``tasks.*``       the chapters' tasks and data (see ``tasks``)       01, 04,
                                                                     09-14
================  =================================================  ==========
"""

__version__ = "0.1.0"

from transformer_course.plotting import use_course_style as _use_course_style

# figures sized and lettered for the page's content column
_use_course_style()
