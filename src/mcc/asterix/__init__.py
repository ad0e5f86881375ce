"""EUROCONTROL ASTERIX for MCC: radar plots in (CAT048, CAT034), system tracks out (CAT062,
CAT065), recordings (raw blocks, pcap, pcapng). docs/asterix.md tells the story.

libasterix (MIT) writes every record and is the specification records are read with
(`mcc.asterix.layout` compiles it for the hot path). Nothing here touches the bus: the apps of
`mcc.apps.asterix` and the radar simulator wire these to it.
"""

from mcc.asterix.blocks import CAUSES, InputStats
from mcc.asterix.cat034 import Marker
from mcc.asterix.cat048 import Plot
from mcc.asterix.cat062 import SystemTrack
from mcc.asterix.editions import EDITIONS
from mcc.asterix.emit import PlotEmitter
from mcc.asterix.gateway import GatewaySettings, RadarGateway, run_gateway
from mcc.asterix.output import OutputSettings, TrackOutput
from mcc.asterix.stream import RadarStream

__all__ = [
    "CAUSES",
    "EDITIONS",
    "GatewaySettings",
    "InputStats",
    "Marker",
    "OutputSettings",
    "Plot",
    "PlotEmitter",
    "RadarGateway",
    "RadarStream",
    "SystemTrack",
    "TrackOutput",
    "run_gateway",
]
