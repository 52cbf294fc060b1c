"""The shipped workloads (``workload=resnet18|gpt|mlp|jpeg``): examples of the Workload
protocol, and the reference workload (ResNet-18 on CIFAR-10-sized images, the model of
PyTorch's profiler tutorial:
https://pytorch.org/tutorials/intermediate/tensorboard_profiler_tutorial.html)."""
