"""Regenerates the project's committed data sets under ``studies/data/``; not part of a trial.

    promptset   python -m datagen.promptset: the public and held-out prompt sets (templates, seeded)
    heldout     python -m datagen.heldout: a held-out set in the organisers' formats and lengths (seeded)
    refset      python -m datagen.refset: the PPL reference sets, sampled from the reference model
    longtexts   python -m datagen.longtexts: the long texts PPL is scored on by context length (this
                system's license texts, tokenised by the reference model's tokenizer)

A maintainer's tool, kept out of the installed distribution: a sweep only reads the files.
"""
