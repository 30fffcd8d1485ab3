from goray_pyshm import main

main()
