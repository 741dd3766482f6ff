"""The connector language: a lark grammar, a parser to plain dataclasses, and a printer back to SQL."""
