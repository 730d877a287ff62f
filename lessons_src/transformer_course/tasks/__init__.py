"""The tasks the chapters train and test on, kept apart from the transformer
itself.

=================  ==================================================  =======
module             the task                                            chapter
=================  ==================================================  =======
``why_attention``  remember the first token; one informative token     01
``dates``          date normalisation                                  09
                   (``"3rd of March, 2021"`` -> ISO)
``python_docs``    Python's reference documentation, a text corpus     10-12
``reviews``        sentiment of short reviews, baselines, fine-tuning  12
=================  ==================================================  =======
"""
