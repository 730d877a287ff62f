"""The tasks the chapters train and test on, kept apart from the transformer
itself.

=================  ==================================================  =======
module             the task                                            chapter
=================  ==================================================  =======
``why_attention``  remember the first token; one informative token     01
``dates``          date normalisation                                  09
                   (``"3rd of March, 2021"`` -> ISO)
``shakespeare``    Shakespeare's plays, the course GPT's text           10-11
``python_docs``    Python's reference documentation, a text corpus     11-13
``reviews``        sentiment of short reviews, baselines, fine-tuning  12
=================  ==================================================  =======
"""
