"""``lezero.utils.tensorboard``: TensorBoard logs from lz code (PyTorch's
``torch.utils.tensorboard``): ``SummaryWriter`` writes scalars, histograms, images, text,
hyperparameters, embeddings and the compiler's graphs (``graph``: ``GraphDef`` from lz IR)."""
from lezero.utils.tensorboard.graph import fused_graph_def, graph_def
from lezero.utils.tensorboard.writer import SummaryWriter

__all__ = ["SummaryWriter", "fused_graph_def", "graph_def"]
