"""Multi-target tracking as a pipeline of steps over arrays (no DDS).

`MultiTargetTracker` composes one implementation of each step declared in `mcc.tracking.base`:
predictors (`CVPredictor`, `IMMPredictor`), updaters (`PositionUpdater`, `PolarEKFUpdater`),
a gater (`Chi2Gater`), an associator (`GNNAssociator` or `JPDAAssociator`), initiators
(`OnePointInitiator`, `TwoPointInitiator`) and a deleter (`ScanPeriodDeleter`), all configured
by one `TrackerConfig`; `mcc.tracking.identity` fuses IFF answers into track identities.
`mcc.tracking.replay` runs it offline on recorded detections (``mcc track replay``). The story
and the defaults: docs/tracking.md.
"""

from mcc.tracking.associators import GNNAssociator
from mcc.tracking.base import (
    Associator,
    Births,
    Deleter,
    Gated,
    Gater,
    Initiator,
    Measurements,
    Predictor,
    TrackLife,
    Updater,
)
from mcc.tracking.config import TrackerConfig, TrackerConfigError
from mcc.tracking.deleters import ScanPeriodDeleter
from mcc.tracking.gaters import Chi2Gater
from mcc.tracking.initiators import OnePointInitiator, TwoPointInitiator
from mcc.tracking.jpda import JPDAAssociator
from mcc.tracking.predictors import CVPredictor, IMMPredictor
from mcc.tracking.scan import PolarDetections, Scan, StepReport, TrackTable
from mcc.tracking.tracker import MultiTargetTracker
from mcc.tracking.updaters import PolarEKFUpdater, PositionUpdater

__all__ = [
    "Associator",
    "Births",
    "CVPredictor",
    "Chi2Gater",
    "Deleter",
    "GNNAssociator",
    "Gated",
    "Gater",
    "IMMPredictor",
    "JPDAAssociator",
    "Initiator",
    "Measurements",
    "MultiTargetTracker",
    "OnePointInitiator",
    "PolarDetections",
    "PolarEKFUpdater",
    "PositionUpdater",
    "Predictor",
    "Scan",
    "ScanPeriodDeleter",
    "StepReport",
    "TrackLife",
    "TrackTable",
    "TrackerConfig",
    "TrackerConfigError",
    "TwoPointInitiator",
    "Updater",
]
