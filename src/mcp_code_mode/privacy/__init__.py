"""Privacy: personal data and secrets tokenized on the way to the model, restored on the way to the tools.

- ``vault``: token ↔ value per client session (``MemoryVault``; ``store.DatabaseVault`` persisted, sealed).
- ``detect``: the detectors (e-mail, phone, card, IBAN, IP, SSN, custom regexes) and the secret finder.
- ``seal``: the key from ``CODE_MODE_PII_KEY``, AES-GCM sealing and the HMACs the persisted forms use.
"""
