"""Small single-purpose Gymnasium wrappers; they compose with each other and with Gymnasium's own.

NormalizeAction, NormalizeObservation   fixed statistics (NormStats), exact inverse
ActionChunking                          one step = a chunk of K actions run in order
LanguageTokens                          instruction text -> fixed-length int64 token ids (Tokenizer)
RecordEpisodes                          episodes -> mp4 (every Nth, camera, fps)
"""

from vlagym.wrappers.chunking import ActionChunking
from vlagym.wrappers.language import LanguageTokens, Tokenizer
from vlagym.wrappers.normalize import FeatureStats, NormalizeAction, NormalizeObservation, NormStats
from vlagym.wrappers.video import RecordEpisodes

__all__ = [
    "ActionChunking",
    "FeatureStats",
    "LanguageTokens",
    "NormStats",
    "NormalizeAction",
    "NormalizeObservation",
    "RecordEpisodes",
    "Tokenizer",
]
