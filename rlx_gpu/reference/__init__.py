"""NumPy twins of every GPU optimizer: same constructor, ``step``, ``params``, ``param_groups``,
``state_dict`` and ``load_state_dict``, in float32 following torch.optim's order of operations.
They are the specification the GPU kernels are tested against."""
from .adafactor import Adafactor
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .base import ReferenceOptimizer
from .kron import Kron
from .lamb import LAMB
from .lion import Lion
from .muon import Muon
from .mars import Mars
from .nadam import NAdamW
from .partition import Partition
from .qhadam import QHAdamW
from .radam import RAdam
from .rmsprop import RMSprop
from .sgd import SGD
from .soap import SOAP
from .sophia import SophiaH
from .sparse_adam import SparseAdam
from .stiefel import StiefelSGD

__all__ = ["Adam", "AdamW", "SGD", "RMSprop", "Adagrad", "LAMB", "NAdamW", "RAdam", "QHAdamW", "Lion", "SophiaH", "Mars", "Adafactor",
           "SparseAdam", "Muon", "StiefelSGD", "SOAP", "Kron", "Partition", "ReferenceOptimizer"]
